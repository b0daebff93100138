"""The certificate is scale-free: the same verdict and the same relative gap for inputs scaled by
any factor; a predictor far from the optimum is never certified because the optimum is small."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gbcli.programs.certify import certificate
from gbcli.programs.design import GatedDesign, Solution
from gbcli.programs.solvers.dual import solve_dual


def separable_design(seed: int = 0, n: int = 40, d: int = 5) -> GatedDesign:
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    x = rng.normal(size=(n, d))
    y = np.sign(x @ w)
    x += 0.5 * y[:, None] * w / np.linalg.norm(w)   # a clear margin
    gates = np.ones((n, 1))
    return GatedDesign(x, y, gates, x[:10], gates[:10], "sq")


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e8, 1e100])
def test_the_certificate_does_not_depend_on_the_scale_of_the_inputs(scale):
    base = separable_design()
    sol = solve_dual(base, working_set=False)
    ref = certificate(base, sol)
    assert sol.status == "optimal" and ref["certified"]
    scaled = replace(base, x_train=base.x_train * scale, x_val=base.x_val * scale)
    # the optimum of the scaled program: zeta / scale (objective / scale^2), the same multipliers' direction
    at_scale = Solution(sol.zeta / scale, "optimal", float("nan"), 0.0, "dual", lam=sol.lam / scale ** 2)
    cert = certificate(scaled, at_scale)
    assert cert["certified"]
    assert cert["rel_gap"] == pytest.approx(ref["rel_gap"], abs=1e-9)
    assert cert["min_margin"] == pytest.approx(ref["min_margin"], rel=1e-9)
    # a predictor 30 times too long has every margin >= 1 and the same dual bound: never certified,
    # however small the optimum is (inputs x 1e100: an optimum near 1e-200)
    far = certificate(scaled, Solution(30 * sol.zeta / scale, "optimal", float("nan"), 0.0, "dual",
                                       lam=sol.lam / scale ** 2))
    assert not far["certified"] and far["rel_gap"] == pytest.approx(1 - 1 / 900, rel=1e-6)


def test_a_permuted_or_negated_solution_is_not_certified():
    """The same objective, other margins: the gap alone cannot see it, the smallest margin does."""
    base = separable_design(1)
    sol = solve_dual(base, working_set=False)
    assert certificate(base, sol)["certified"]
    for bad in (-sol.zeta, sol.zeta[:, ::-1].copy()):
        cert = certificate(base, Solution(bad, "optimal", float("nan"), 0.0, "dual", lam=sol.lam))
        assert not cert["certified"] and cert["min_margin"] < 1 - 1e-6


@pytest.mark.slow
def test_gb_verify_uses_the_tolerance_it_is_given_and_says_so(tmp_path):
    """The tolerance is the user's (`--tol`, default the strict 1e-6), printed, never a stored
    config's: a run whose config says `svm.certify_tol: 0.5` is held to 1e-6 all the same."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]
    import forked_gb   # a real process forked from one that has imported gb

    gb = lambda *a: forked_gb.run(a, tmp_path, timeout=300, argv0=forked_gb.CLI)
    assert gb("fit-svm", root / "configs" / "quickstart.yaml", "--out", "run", "-q",
              "--set", "svm.objectives=[svm-l2]").returncode == 0
    p = gb("verify", "run")
    assert p.returncode == 0 and "1 of 1 verified (trained networks and programs; certificates at tolerance 1e-06)" in p.stdout, p.stdout + p.stderr
    strict = gb("verify", "run", "--tol", "1e-15")   # below the solve's own gap: not certified at that tolerance
    assert strict.returncode == 1 and "at tolerance 1e-15" in strict.stdout, strict.stdout + strict.stderr
    cfg_path = tmp_path / "run" / "svm" / "svm-l2" / "config.yaml"
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["svm"]["certify_tol"] = 0.5
    cfg_path.write_text(yaml.safe_dump(cfg))
    again = gb("verify", "run", "--tol", "1e-15")
    assert again.returncode == 1, again.stdout   # the stored 0.5 does not relax it
    for bad in ("0", "1", "nan", "-1e-6"):
        p = gb("verify", "run", "--tol", bad)
        assert p.returncode == 2 and p.stderr.startswith("gb: error: --tol"), p.stderr
