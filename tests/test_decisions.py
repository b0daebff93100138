"""The decisions that make a result what it is, each checked directly against its definition
(protocol.md, README), so that a one-line change to any of them fails `make test-fast`:

- a certificate: the relative gap AND the smallest training margin, at the default tolerance 1e-6;
- the learning-rate schedule: 0.04, then x0.25 from the milestone epoch on (protocol section 4);
- the binary labels: digits 0-4 are +1, 5-9 are -1, and the seeded split (protocol section 2);
- a sweep point's identity: every key that changes what is computed changes the id, the keys
  declared not to change a result do not (a grid over training.batch_seed must not collapse);
- the inconsistency expected of an uncorrelated predictor, 2p(1-p) (protocol section 7);
- the error and inconsistency tables built from a run's stored outputs, column by column;
- and a few more of the same kind: a tie is an error, a point on a hyperplane is on its 0 side,
  median init halves the data, `gb verify` recomputes what a record claims.

Expected values are derived here from the definitions (or from independent code: torch's
random_split, the IDX files read by hand), never copied from gb's outputs. `scripts/mutate.py`
lists the mutations these tests are meant to kill.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import gzip
import json
import math
import shutil
import struct
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from gbcli.config import Config, apply_preset, validate
from gbcli.data.sources import DATASETS
from gbcli.data.sources import load_dataset
from gbcli.metrics import error, expected_if_uncorrelated, inconsistency
from gbcli.models.gating import Hyperplanes
from gbcli.programs import Solution, certificate, solve_dual
from gbcli.programs.certify import (dual_bound, predictor_from, recovery_scales, relative_gap,
                                    relative_margin_bound, scale_groups)
from gbcli.programs.design import GatedDesign
from gbcli.programs.ipm import NOT_SEPARABLE
from gbcli.registry import MODELS
from gbcli.runs.stages import build_design, fit_svm, prepare, train_gd
from gbcli.runs.sweep import expand
from gbcli.runs.verify import check_solution, verify
from gbcli.training.loop import epoch_lr

from gbcli.runs.compare import compare
from gbcli.store.identity import point_id

REPO = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------------
# the definitions, as the protocol and README state them (not read from gb)

DEFAULT_CERTIFY_TOL = 1e-6             # README: svm.certify_tol (default 1e-6)
POSITIVE_DIGITS = {0, 1, 2, 3, 4}      # protocol section 2: digits 0-4 are class +1, 5-9 class -1
PAPER_LR, PAPER_DECAY = 0.04, 0.25     # protocol section 4: 0.04, then 0.01 (x0.25) for the second half
MNIST_VAL = 12000                      # protocol section 2: the last 12,000 indices are validation


# =============================================================================================
# 1, 7. certificates: both checks, at the default tolerance


@functools.lru_cache(maxsize=None)
def _solved(objective: str):
    """A real small program (digits, H = 3, C = 2, N = 120), solved by the dual solver."""
    cfg = validate({"dataset": {"name": "digits", "train_size": 120, "val_size": 200, "data_seed": 1},
                    "model": {"kind": "gln", "hidden_units": 3}, "contexts": {"count": 2, "seed": 1},
                    "svm": {"objectives": [objective]}}, "test")
    design = build_design(objective, cfg, prepare(cfg))
    sol = solve_dual(design)
    assert sol.status == "optimal" and sol.zeta is not None and sol.lam is not None, sol.message
    return design, sol


@pytest.fixture(scope="module", params=["svm-gln", "svm-l2"])
def solved(request):
    design, sol = _solved(request.param)
    cert = certificate(design, sol)
    # the starting point: certified with room to spare, so the perturbations below decide alone
    assert cert["certified"] and abs(cert["rel_gap"]) < 1e-8 and cert["min_margin"] > 1 - 1e-8, cert
    return design, sol, cert


def _with(sol: Solution, zeta: np.ndarray) -> Solution:
    return Solution(zeta, sol.status, sol.value, sol.seconds, sol.solver, sol.message, sol.iterations, sol.lam)


def _margins(design, zeta) -> np.ndarray:
    """y_n f(x_n), f(x) = sum_r E[n, r] <zeta_r, x_n> (protocol section 5), computed here."""
    return np.einsum("nr,rd,nd->n", design.e_train, zeta, design.x_train) * design.y_train


def test_the_default_certificate_tolerance_is_1e6():
    assert validate({}, "test").svm.certify_tol == DEFAULT_CERTIFY_TOL
    design, sol = _solved("svm-gln")
    assert certificate(design, sol)["tolerance"] == DEFAULT_CERTIFY_TOL


def test_a_negated_solution_keeps_its_objective_and_does_not_certify(solved):
    design, sol, cert = solved
    bad = certificate(design, _with(sol, -sol.zeta))
    assert bad["primal_objective"] == pytest.approx(cert["primal_objective"], rel=1e-12)   # the norm is even
    assert abs(bad["rel_gap"]) <= DEFAULT_CERTIFY_TOL                                       # the gap cannot see it
    assert bad["min_margin"] == pytest.approx(-_margins(design, sol.zeta).max(), rel=1e-9)
    assert bad["min_margin"] < 0 and not bad["certified"]


@pytest.mark.parametrize("shift", [1, "units"])
def test_a_solution_with_permuted_rows_keeps_its_objective_and_does_not_certify(solved, shift):
    """Rows r = h*C + c. Both norms are invariant under permuting the contexts within each unit and
    under permuting the units (svm-gln: a sum of the units' group norms; svm-l2: Mt[(h,c),(h',c')] =
    1 + C [h=h'][c=c'] - [h=h'] sees only equalities): the objective is the same, the predictor not."""
    design, sol, cert = solved
    h, c = design.units, design.count
    if shift == "units":
        order = np.roll(np.arange(h), 1)[:, None] * c + np.arange(c)[None, :]
    else:
        order = np.arange(h)[:, None] * c + np.roll(np.arange(c), shift)[None, :]
    zeta = sol.zeta[order.reshape(-1)]
    assert not np.array_equal(zeta, sol.zeta)
    bad = certificate(design, _with(sol, zeta))
    assert bad["primal_objective"] == pytest.approx(cert["primal_objective"], rel=1e-12)
    assert abs(bad["rel_gap"]) <= DEFAULT_CERTIFY_TOL
    assert bad["min_margin"] == pytest.approx(_margins(design, zeta).min(), rel=1e-9, abs=1e-12)
    assert bad["min_margin"] < 1 - DEFAULT_CERTIFY_TOL and not bad["certified"]


def _scaled(design, sol, factor):
    return certificate(design, _with(sol, sol.zeta * factor))


@pytest.mark.parametrize("times", [10.0, 0.1])
def test_the_gap_check_is_at_the_default_tolerance(solved, times):
    """zeta scaled up by 1 + a: every margin >= 1, the objective (1 + a)^q P (q = 2 for the
    quadratic svm-l2) over a dual bound of P, a relative gap of about q a. The gap alone decides:
    q a 10 times above the tolerance fails, 10 times below passes."""
    design, sol, cert = solved
    q = 2 if design.norm != "group" else 1
    a = times * DEFAULT_CERTIFY_TOL / q
    got = _scaled(design, sol, 1 + a)
    assert got["min_margin"] >= 1
    expected_gap = 1 - cert["dual_objective"] / (cert["primal_objective"] * (1 + a) ** q)
    assert got["rel_gap"] == pytest.approx(expected_gap, rel=1e-3)
    assert got["certified"] is (times < 1)
    assert certificate(design, _with(sol, sol.zeta * (1 + a)), tol=DEFAULT_CERTIFY_TOL)["certified"] is (times < 1)


def _rotated(design, zeta: np.ndarray, theta: float, seed: int = 0) -> np.ndarray:
    """Each unit's rows (a group of the GLN norm) rotated by theta towards a random direction of the
    same norm orthogonal to it: every group's norm, so the svm-gln objective, is unchanged."""
    rng = np.random.default_rng(seed)
    out = zeta.copy()
    for g in design.groups:
        z = zeta[g]
        u = rng.standard_normal(z.shape)
        u -= z * (np.sum(u * z) / np.sum(z * z))
        u *= np.linalg.norm(z) / np.linalg.norm(u)
        out[g] = math.cos(theta) * z + math.sin(theta) * u
    return out


@pytest.mark.parametrize("times", [10.0, 0.1])
def test_the_margin_check_is_at_the_default_tolerance(times):
    """svm-gln's predictor rotated within its groups (the objective is unchanged, so is the gap)
    until its smallest training margin is 1 - times * tol: 10 times the tolerance below 1 fails,
    a tenth of it passes."""
    design, sol = _solved("svm-gln")
    base = certificate(design, sol)
    target = 1 - times * DEFAULT_CERTIFY_TOL
    lo, hi = 0.0, 0.5   # the smallest margin falls continuously with theta, below target at 0.5
    assert _margins(design, _rotated(design, sol.zeta, hi)).min() < target
    for _ in range(80):
        mid = (lo + hi) / 2
        if _margins(design, _rotated(design, sol.zeta, mid)).min() > target:
            lo = mid
        else:
            hi = mid
    zeta = _rotated(design, sol.zeta, hi)
    got = certificate(design, _with(sol, zeta))
    assert got["primal_objective"] == pytest.approx(base["primal_objective"], rel=1e-12)
    assert abs(got["rel_gap"]) < 1e-8                       # the gap check passes: the margin decides
    assert got["min_margin"] == pytest.approx(target, abs=1e-3 * times * DEFAULT_CERTIFY_TOL)
    assert got["certified"] is (times < 1)


def _pair(a: float, norm: str = "sq") -> GatedDesign:
    """Two one-dimensional points, x = a (label +1) and x = 1 (label -1), one gate row."""
    x = np.array([[a], [1.0]])
    return GatedDesign(x, np.array([1.0, -1.0]), np.ones((2, 1)), x, np.ones((2, 1)), norm)


def test_a_failed_solve_without_multipliers_is_not_certified():
    design, _ = _solved("svm-gln")
    got = certificate(design, Solution(None, "failed", float("nan"), 0.0, "dual"))
    assert got["certified"] is False and math.isnan(got["primal_objective"]) and math.isnan(got["min_margin"])


def test_only_an_infeasible_solve_certifies_a_ray():
    """x = 1 with both labels: lam = (1, 1) gives V = 0, every predictor's relative margin is at most 0.
    That ray certifies the infeasibility a solver reported, never a failed solve; and the multipliers of
    a separable program do not certify an infeasibility."""
    ray = _pair(1.0)
    lam = np.array([1.0, 1.0])
    assert relative_margin_bound(ray, lam) == 0.0 <= NOT_SEPARABLE
    assert certificate(ray, Solution(None, "infeasible", float("nan"), 0.0, "dual", lam=lam))["certified"] is True
    assert certificate(ray, Solution(None, "failed", float("nan"), 0.0, "dual", lam=lam))["certified"] is False
    design, sol = _solved("svm-gln")
    assert relative_margin_bound(design, sol.lam) > NOT_SEPARABLE
    assert certificate(design, Solution(None, "infeasible", float("nan"), 0.0, "dual", lam=sol.lam))["certified"] is False


@pytest.mark.parametrize("objective", ["svm-gln", "svm-l2"])
def test_the_relative_margin_bound_does_not_change_with_the_scale_of_the_inputs(objective):
    """min_n y_n f(x_n) / (||zeta|| radius) is scale-free: inputs x 10 leave the bound from the same
    multipliers unchanged. Without multipliers (lam = 0) no predictor is excluded: the bound is inf."""
    design, sol = _solved(objective)
    big = dataclasses.replace(design, x_train=10 * design.x_train, x_val=10 * design.x_val)
    got = relative_margin_bound(design, sol.lam)
    assert 0 < got < 1 and relative_margin_bound(big, sol.lam) == pytest.approx(got, rel=1e-9)
    assert relative_margin_bound(design, np.zeros_like(sol.lam)) == float("inf")


def test_the_relative_gap_of_a_zero_objective_with_no_scale():
    """Inputs of radius 0 give a scale of 0: a zero primal is then exactly certified by a zero dual
    and infinitely far from a nonzero one; an infinite radius likewise gives no floor."""
    assert relative_gap(0.0, 0.0, 0.0, True) == 0.0
    assert relative_gap(0.0, -1.0, 0.0, True) == float("inf")
    assert relative_gap(0.0, 0.0, float("inf"), False) == 0.0
    assert relative_gap(2.0, 1.0, 0.0, True) == 0.5


def test_a_cancelling_combination_is_summed_exactly():
    """lam = (l, fl(l a)) on x = (a, 1), labels (+1, -1), l = fl(1/3), a = 1 + 2^-30: V = l a - fl(l a)
    is the rounding error of one product, 0 in float64 arithmetic. The dual bound must use V's exact value,
    rounded once: (sum lam / |V|)^2 for the squared norm."""
    a = 1 + 2.0 ** -30
    l1 = 1 / 3
    lam = np.array([l1, l1 * a])
    exact = Fraction(l1) * Fraction(a) - Fraction(float(lam[1]))
    assert exact != 0 and float(lam[0] * a - lam[1]) == 0.0
    expected = (float(lam.sum()) / abs(float(exact))) ** 2
    assert dual_bound(_pair(a), lam) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("objective", ["svm-gln", "svm-l2"])
def test_stored_multipliers_and_scales_give_back_their_predictor(objective):
    """zeta = recover(V(lam), s): recovery_scales(zeta, lam) returns s, and predictor_from(lam, s)
    that zeta again (a compact stored solution loses only rounding)."""
    design, sol = _solved(objective)
    s = np.random.default_rng(3).uniform(0.5, 2.0, len(scale_groups(design)))
    zeta = predictor_from(design, sol.lam, s)
    assert recovery_scales(design, zeta, sol.lam) == pytest.approx(s, rel=1e-10)
    got = recovery_scales(design, sol.zeta, sol.lam)
    assert np.allclose(predictor_from(design, sol.lam, got), sol.zeta, rtol=1e-7, atol=1e-9 * np.abs(sol.zeta).max())


# =============================================================================================
# 2. the learning-rate schedule


def _paper(n: int):
    return validate(apply_preset({"preset": "paper", "dataset": {"train_size": n}, "model": {"kind": "gln"}}), "test")


@pytest.mark.parametrize("n", [500, 1000, 2000])
def test_the_paper_schedule_is_004_for_the_first_half_and_001_for_the_second(n):
    """Protocol section 4: 200*2000/N epochs, lr 0.04 for the first half, 0.01 from epoch 100*2000/N on."""
    t = _paper(n).training
    epochs, decay_at = 200 * 2000 // n, 100 * 2000 // n
    assert t.epochs == epochs
    lrs = [epoch_lr(t, e) for e in range(epochs)]
    expected = [PAPER_LR if e < decay_at else PAPER_LR * PAPER_DECAY for e in range(epochs)]
    assert lrs == pytest.approx(expected, rel=1e-15)
    assert sum(lr == pytest.approx(PAPER_LR) for lr in lrs) == epochs // 2     # exactly half at 0.04


@pytest.mark.parametrize("milestones", [[1], [2, 3], [1, 3]])
def test_each_milestone_decays_the_rate_from_its_own_epoch_on(milestones):
    t = validate({"training": {"epochs": 5, "lr": 0.1, "lr_decay": 0.5, "lr_milestones": milestones}}, "test").training
    for e in range(5):
        passed = sum(1 for m in milestones if e >= m)   # a milestone m: epochs m, m+1, ... are decayed
        assert epoch_lr(t, e) == pytest.approx(0.1 * 0.5 ** passed, rel=1e-15), (e, milestones)


# =============================================================================================
# 6 (and 2, 5). a tiny real run: its logged schedule, and its tables column by column

RUN = {"name": "decisions", "dataset": {"name": "digits", "train_size": 64, "val_size": 300, "data_seed": 2},
       "model": {"kind": "gln", "hidden_units": 3, "init_seed": 5},
       "contexts": {"count": 4, "seed": 6, "median_init": False},
       "training": {"batch_size": 16, "epochs": 4, "lr": 0.04, "lr_milestones": [2], "lr_decay": 0.25,
                    "momentum": 0.5, "log_points": 17},
       "svm": {"objectives": ["svm-gln"]}}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cfg = validate(copy.deepcopy(RUN), "test")
    out = tmp_path_factory.mktemp("run")
    train_gd(cfg, out, progress=False)
    fit_svm(cfg, out)
    return cfg, out


def test_a_runs_logged_learning_rate_follows_the_milestones(run):
    """64 points in batches of 16: 4 steps an epoch, every step logged. Steps 0-7 (epochs 0 and 1)
    at 0.04, steps 8-16 (epochs 2 and 3, and the final row) at 0.04 x 0.25."""
    cfg, out = run
    m = pd.read_csv(out / "gd" / "metrics.csv")
    assert list(m["step"]) == list(range(17))
    expected = [0.04 if step < 2 * 4 else 0.04 * 0.25 for step in m["step"]]
    assert list(m["lr"]) == pytest.approx(expected, rel=1e-12)


def _error(out: np.ndarray, y: np.ndarray) -> float:
    """Protocol section 7: the fraction misclassified by sign(out), a tie (out = 0) an error."""
    return float(np.mean(~(np.asarray(out) * y > 0)))


def test_the_error_table_takes_each_column_from_its_own_source(run):
    cfg, out = run
    errors, incons = compare(out)
    ds = prepare(cfg).dataset
    with np.load(out / "gd" / "predictions.npz") as p:
        gd_train, gd_val = _error(p["train_out"], ds.y_train), _error(p["val_out"], ds.y_val)
    with np.load(out / "svm" / "svm-gln" / "predictions.npz") as p:
        svm_train, svm_val = _error(p["train_out"], ds.y_train), _error(p["val_out"], ds.y_val)
    assert gd_train != gd_val and svm_train != svm_val        # the test can tell the columns apart
    assert list(errors["predictor"]) == ["gd-gln", "svm-gln"]
    gd, svm = errors.iloc[0], errors.iloc[1]
    for row in (gd, svm):   # the point's configuration, as configured (every value distinct above)
        assert (row["model"], row["hidden_units"], row["contexts"], row["train_size"], row["data_seed"],
                row["context_seed"], row["init_seed"], bool(row["median_init"]), row["momentum"]) == \
               ("gln", 3, 4, 64, 2, 6, 5, False, 0.5)
    assert (gd["train_error"], gd["val_error"], gd["status"]) == (gd_train, gd_val, "ok")
    assert (svm["train_error"], svm["val_error"], svm["status"]) == (svm_train, svm_val, "optimal")
    summary = json.loads((out / "gd" / "summary.json").read_text())
    assert (summary["train_error"], summary["val_error"]) == (gd_train, gd_val)
    result = json.loads((out / "svm" / "svm-gln" / "result.json").read_text())
    assert svm["objective"] == result["objective"] and bool(svm["certified"]) is True


def test_the_inconsistency_table_pairs_the_svm_with_the_gd_network(run):
    cfg, out = run
    _, incons = compare(out)
    ds = prepare(cfg).dataset
    with np.load(out / "gd" / "predictions.npz") as p:
        gd_out = p["val_out"]
    with np.load(out / "svm" / "svm-gln" / "predictions.npz") as p:
        svm_out = p["val_out"]
    p_gd, p_svm = _error(gd_out, ds.y_val), _error(svm_out, ds.y_val)
    assert len(incons) == 1
    row = incons.iloc[0]
    assert (row["predictor_a"], row["predictor_b"]) == ("svm-gln", "gd-gln")
    assert row["inconsistency"] == float(np.mean(np.sign(svm_out) != np.sign(gd_out)))
    assert (row["gd_val_error"], row["svm_val_error"]) == (p_gd, p_svm)
    assert row["expected_if_uncorrelated"] == pytest.approx(2 * p_gd * (1 - p_gd), rel=1e-12)
    assert (row["model"], row["hidden_units"], row["contexts"], row["train_size"]) == ("gln", 3, 4, 64)


# =============================================================================================
# 5. the inconsistency of an uncorrelated predictor


def _disagreement_of_independent(p: float) -> float:
    """P(two independent predictors, each wrong with probability p, disagree) on a binary label:
    exactly one of them is wrong (GLN paper, footnote 6)."""
    return sum(pa * pb for a, pa in ((0, 1 - p), (1, p)) for b, pb in ((0, 1 - p), (1, p)) if a != b)


@pytest.mark.parametrize("p,hand", [(0.0, 0.0), (0.1, 0.18), (0.25, 0.375), (0.5, 0.5), (0.9, 0.18), (1.0, 0.0)])
def test_expected_inconsistency_of_an_uncorrelated_predictor_is_2p_1_minus_p(p, hand):
    assert _disagreement_of_independent(p) == pytest.approx(hand, abs=1e-15)
    assert expected_if_uncorrelated(p) == pytest.approx(hand, abs=1e-15)


def test_expected_inconsistency_matches_a_simulation():
    rng = np.random.default_rng(0)
    y = rng.choice([-1.0, 1.0], 200_000)
    a = np.where(rng.random(y.size) < 0.2, -y, y)
    b = np.where(rng.random(y.size) < 0.2, -y, y)
    assert float(np.mean(a != b)) == pytest.approx(expected_if_uncorrelated(0.2), abs=0.005)


# =============================================================================================
# 3. the binary labels and the split


def _mnist_file(root: Path, stem: str) -> bytes:
    for name in (stem + ".gz", stem):
        path = root / "mnist" / name
        if path.is_file():
            return gzip.decompress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes()
    pytest.skip(f"{root}/mnist/{stem}[.gz] not found")


def _mnist_labels(root: Path) -> np.ndarray:
    raw = _mnist_file(root, "train-labels-idx1-ubyte")
    magic, n = struct.unpack(">II", raw[:8])
    assert (magic, n) == (2049, 60000)
    return np.frombuffer(raw, np.uint8, offset=8).astype(np.int64)


def _binary(labels: np.ndarray) -> np.ndarray:
    return np.where(np.isin(labels, sorted(POSITIVE_DIGITS)), 1.0, -1.0)


def _random_split(n_total: int, train: int, val: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Protocol section 2: torch's random_split(range(n), [train, rest, val]) with the seeded generator."""
    parts = torch.utils.data.random_split(range(n_total), [train, n_total - train - val, val],
                                          generator=torch.Generator().manual_seed(seed))
    return np.asarray(parts[0].indices), np.asarray(parts[2].indices)


def test_the_default_labels_are_digits_0_to_4_against_5_to_9():
    from sklearn.datasets import load_digits

    cfg = validate({"dataset": {"train_size": 300}}, "test")     # digits, every label key left to its default
    assert sorted(cfg.dataset.positive_classes) == sorted(POSITIVE_DIGITS)
    ds = cfg.dataset.load()
    target = load_digits().target
    assert np.array_equal(ds.y_train, _binary(target[ds.train_idx]))
    assert np.array_equal(ds.y_val, _binary(target[ds.val_idx]))


def test_mnist_labels_and_split_are_the_protocols(shared_data_dir):
    labels = _mnist_labels(shared_data_dir)
    raw = {"dataset": {"name": "mnist", "train_size": 500, "data_seed": 3, "data_dir": str(shared_data_dir)}}
    for cfg in (validate(raw, "default"), validate(apply_preset({**raw, "preset": "paper"}), "paper")):
        ds = cfg.dataset.load()
        train, val = _random_split(60000, 500, MNIST_VAL, 3)
        assert np.array_equal(ds.train_idx, train) and np.array_equal(ds.val_idx, val)
        assert np.array_equal(ds.y_train, _binary(labels[train]))
        assert np.array_equal(ds.y_val, _binary(labels[val]))
        assert (ds.y_train == 1).mean() == pytest.approx(np.isin(labels[train], [0, 1, 2, 3, 4]).mean())
    # the loader's own default too (library use, without a config)
    ds = load_dataset("mnist", train_size=500, val_size=MNIST_VAL, data_seed=3, data_dir=shared_data_dir)
    assert np.array_equal(ds.y_train, _binary(labels[ds.train_idx]))


def test_mnist_inputs_are_the_protocols(shared_data_dir):
    """Protocol section 2: pixels p/255 mapped to [-1, 1] by (p - 0.5)/0.5, a constant 1 appended (D = 785)."""
    raw = _mnist_file(shared_data_dir, "train-images-idx3-ubyte")
    magic, n, rows, cols = struct.unpack(">IIII", raw[:16])
    assert (magic, n, rows, cols) == (2051, 60000, 28, 28)
    images = np.frombuffer(raw, np.uint8, offset=16).reshape(n, rows * cols)
    ds = load_dataset("mnist", train_size=200, val_size=100, data_seed=1, data_dir=shared_data_dir)
    want = (images[ds.train_idx] / 255.0 - 0.5) / 0.5
    assert ds.x_train.shape == (200, 785)
    np.testing.assert_allclose(ds.x_train[:, :784], want, rtol=0, atol=1e-15)
    assert np.all(ds.x_train[:, 784] == 1.0)


# =============================================================================================
# 4. a sweep point's identity

# Keys declared to change no result (README; gbcli.runs.sweep's NOT_IDENTITY and
# NOT_IDENTITY_KEYS): changing one keeps a point's id, so a rerun under another value resumes it.
NOT_RESULT = {"name", "output.dir", "training.validation", "training.checkpoint_seconds", "svm.time_limit",
              "svm.device"} | {"sweep.*", "tracking.*"}
# Keys for which no assertion is made, each for a stated reason.
UNASSERTED = {
    "preset": "a meta key: what it expands to is identity through the values it sets",
    "grid": "a meta key: each point's values are its identity",
    "zip": "a meta key: each point's values are its identity",
    "dataset.*.data_dir": "where the (checksummed) files are read: either choice is defensible",
    "dataset.points.data_seed": "unused by a points set (it is not split): either choice is defensible",
    "dataset.points.train_size": "fixed to the number of points: no other valid value",
    "dataset.points.val_size": "fixed to the number of points: no other valid value",
    "model.shallow.hidden_units": "fixed to 1: no other valid value",
}

# One alternative value per key (by key name; per section where the key needs it). A callable
# edits the raw config itself (a key that cannot change alone, e.g. a depth with its weights).
ALT = {
    "train_size": 120, "val_size": 300, "data_seed": 2, "data_dir": "/elsewhere",
    "positive_classes": [0, 2, 4, 6, 8], "classes": [3, 5], "max_norm": 1.0, "pixel_range": [0.0, 1.0],
    "n_samples": 400, "dim": 10, "synthetic_seed": 1, "bias": True, "margin": 0.1, "mean_norm": 2.0, "std": 0.5,
    "x": [[1.0, 0.0], [0.0, 3.0]], "y": [-1, 1],
    "init_seed": 7, "init_scale": 0.5, "hidden_units": 12, "output_bias": False, "init": "kaiming",
    "freeze_gates_after": 5, "leaky_alpha": 0.1, "output_weight": 2.0, "width": 12, "fc_units": 64,
    "convs": [[16, 3, 1, 1]], "activation": "linear",
    "count": 4, "seed": 2, "median_init": False, "normal_std": 1.0, "offset_std": 1.0, "draws": "published",
    "batch_size": 64, "lr": 0.02, "momentum": 0.9, "optimizer": "adam", "epochs": 50, "lr_milestones": [10],
    "lr_decay": 0.5, "loss": "exponential", "batch_seed": 2, "device": "cuda", "log_points": 20,
    "log_spacing": "log", "step_rule": "loss-normalized", "descent": "coordinate", "track": ["margin"],
    "validation": "final", "checkpoint_seconds": 0.0, "init_from": "/elsewhere/model.pt",
    "objectives": ["svm-gln"], "solver": "clarabel", "max_iters": 50, "eps": 1e-4, "certify_tol": 1e-5,
    "time_limit": 10.0, "restarts": 7, "radii": [0.5], "search_seed": 3,
    "dir": "elsewhere", "name": "other",
    "executor": "slurm", "jobs": 2, "partition": "p", "time_min": 61, "cpus": 2, "mem_gb": 5.0, "threads": 2,
    "batch": 13, "solve_cache": False, "gpus": 1, "account": "a", "qos": "q", "constraint": "c",
    "slurm": {"comment": "x"},
}


def _other_kind(raw: dict, section: str) -> None:
    if section.startswith("model."):
        raw["model"] = {"kind": "linear" if section != "model.linear" else "relu"}
    else:
        raw["dataset"] = {"name": "mnist" if section != "dataset.mnist" else "digits", "train_size": 100}
        raw["model"] = {"kind": "gln"}


ALT_BY_SECTION = {
    "tracking.mlflow": "sqlite:////tmp/elsewhere.db", "tracking.experiment": "other",
    "training.betas": [0.8, 0.99], "training.eps": 1e-6, "training.mirror_p": 1.25,
    "model.diagonal.activation": "relu",
    "model.diagonal.depth": lambda raw: raw["model"].update(depth=3, weights={"w": [[1.0, 0.0]] * 3}),
    "model.diagonal.weights": {"w": [[1.0, 1.0], [1.0, 1.0]]},
    "model.conv.activation": "linear",
    "model.conv.patches": lambda raw: (raw["dataset"].update(x=[[4.0, 0.5, -4.0, 0.5]], y=[1]),
                                       raw["model"].update(patches=4, weights={"w": [1.0], "v": [0.5] * 4})),
    "model.conv.weights": {"w": [1.0, 0.0], "v": [0.7, 0.7]},
    "model.relu.weights": {"w1": [[0.1, 1.0], [-0.2, -1.0]], "w2": [[0.5, 0.4]]},
    "model.frelu.weights": {"w1": [[0.1, 1.0], [-0.2, -1.0]], "w2": [[0.5, 0.4]]},
    "model.deep-linear.depth": 3, "model.residual.depth": 3,
    "model.leaky.hidden_units": 12, "model.gln3.hidden_units": 12,
    "dataset.points.x": [[1.0, 0.0], [0.0, 3.0]],
    "training.adaptive_step": {"every": 50},
}


def _base(section: str, key: str) -> dict:
    """The config a key is changed in: the section's kind, with what that kind needs."""
    raw = {"dataset": {"name": "digits", "train_size": 100}, "model": {"kind": "gln"}}
    if section.startswith("dataset."):
        kind = section.split(".", 1)[1]
        if kind == "points":
            raw["dataset"] = {"name": "points", "x": [[1.0, 0.0], [0.0, 1.0]], "y": [1, -1]}
            raw["model"] = {"kind": "relu", "hidden_units": 2}
        elif kind in ("mnist", "fashion-mnist", "digits"):
            raw["dataset"] = {"name": kind, "train_size": 100}
        else:
            raw["dataset"] = {"name": kind, "train_size": 100, "n_samples": 300}
    if section.startswith("model."):
        kind = section.split(".", 1)[1]
        raw["model"] = {"kind": kind}
        if kind in ("relu", "frelu"):
            raw["dataset"] = {"name": "points", "x": [[1.0, 0.25], [-1.0, 0.25]], "y": [1, 1]}
            raw["model"]["hidden_units"] = 2
        elif kind == "diagonal":
            raw["dataset"] = {"name": "points", "x": [[1.0, 2.0]], "y": [1]}
            raw["model"].update(activation="linear", weights={"w": [[1.0, 0.0], [1.0, 0.0]]})
        elif kind == "conv":
            raw["dataset"] = {"name": "points", "x": [[4.0, 0.7, -4.0, 0.7]], "y": [1]}
            raw["model"].update(activation="relu", weights={"w": [0.0, 1.0], "v": [0.7, 0.7]})
        elif kind == "convnet":
            raw["dataset"] = {"name": "mnist", "train_size": 100}
    if section == "training" and key == "track":
        raw["model"]["output_bias"] = False   # the instruments need an exactly homogeneous model
    if section == "training" and key == "descent":
        raw["model"] = {"kind": "linear"}     # coordinate descent is for linear models
    if section == "training" and key == "adaptive_step":   # it re-estimates a normalized full-batch step
        raw["training"] = {"step_rule": "loss-normalized", "batch_size": None}
    if section == "training" and key in ("betas", "eps", "mirror_p"):   # the settings of one optimizer
        raw["training"] = {"optimizer": "mirror" if key == "mirror_p" else "adam"}
    if section == "svm" and key in ("restarts", "radii", "search_seed"):   # paper 003's programs' options
        raw["dataset"] = {"name": "points", "x": [[1.0, 0.25], [-1.0, 0.25]], "y": [1, 1]}
        raw["model"] = {"kind": "relu", "hidden_units": 2}
        raw["svm"] = {"objectives": ["nonconvex-global"]}
    return raw


def _changed(section: str, key: str) -> dict:
    raw = _base(section, key)
    where = f"{section}.{key}" if section else key
    if key in ("kind", "name") and section.split(".")[0] in ("model", "dataset"):
        _other_kind(raw, section)
        return raw
    value = ALT_BY_SECTION.get(where, ALT.get(key))
    if callable(value):
        value(raw)
        return raw
    top = section.split(".")[0]
    if not top:
        raw[key] = copy.deepcopy(value)
    else:
        raw.setdefault(top, {})[key] = copy.deepcopy(value)
    return raw


def _every_key() -> list[tuple[str, str]]:
    """(section, key) of every key of the live schema: the top level (section ""), each section, and
    each model kind's and dataset kind's own keys (sections model.<kind>, dataset.<name>)."""
    out = []
    for name, field in Config.model_fields.items():
        ann = field.annotation
        if name == "model":
            out += [(f"model.{kind}", k) for kind, spec in MODELS.items() for k in spec.Params.model_fields]
        elif name == "dataset":
            out += [(f"dataset.{kind}", k) for kind, cls in DATASETS.items() for k in cls.model_fields]
        elif isinstance(ann, type) and hasattr(ann, "model_fields"):
            out += [(name, k) for k in ann.model_fields]
        else:
            out.append(("", name))
    return out


def _declared(section: str, key: str, table) -> bool:
    top = section.split(".")[0]
    names = {f"{section}.{key}" if section else key, f"{top}.*", f"{top}.*.{key}"}
    return bool(names & set(table))


@pytest.mark.parametrize("grid", ["fig2", "fig3", "shallow"])
def test_the_committed_grids_keep_their_point_ids(grid):
    """results/paper/<grid>/solutions/<id>/ were written by `gb sweep configs/paper/<grid>.yaml`: the
    ids of that config's points today are exactly those folders (an id that changed would orphan
    every committed result, and `gb verify` would find no point for them)."""
    _, points = expand(REPO / "configs" / "paper" / f"{grid}.yaml")
    stored = {p.name for p in (REPO / "results" / "paper" / grid / "solutions").iterdir() if p.is_dir()}
    assert len(stored) == len(points) and {point_id(p) for p in points} == stored


def test_the_svm_manifest_changes_with_what_is_solved_and_nothing_else(tmp_path):
    """A finished program is reused only for the same program: another solver, tolerance or
    iteration cap is another manifest; which objectives are asked for and how long a solve may
    take are not."""
    from gbcli.store.identity import svm_manifest

    def manifest(**svm):
        return svm_manifest(validate({"svm": {"objectives": ["svm-gln"], **svm}}, "test"), tmp_path, False)

    base = manifest()
    # what the code before issue 33 computed (99250f4^, gbcli/runs/integrity.py): finished programs stay valid
    assert base == {"problem": "d12a55e8f9d5223b", "config": "4b988711a9ea13c5", "upstream": None}
    for change in ({"solver": "ecos"}, {"certify_tol": 1e-7}, {"max_iters": 50}, {"eps": 1e-9}):
        assert manifest(**change)["config"] != base["config"], change
    for same in ({"objectives": ["svm-l2"]}, {"time_limit": 60.0}):
        assert manifest(**same) == base, same


def test_a_key_left_at_its_default_is_not_part_of_the_point_id():
    """For every model kind on every dataset it can use, a config that names only the two leaves
    out of its id every key at its default: what remains is the kind and the dataset named, the
    validation size derived from the dataset, and the kinds' own sizes where they differ from the
    GLN's (a deep-linear net's depth, a diagonal net's units). A key whose frozen id default drifted
    from its real default would change the id of every existing sweep point that leaves it unset."""
    from gbcli.errors import GbError
    from gbcli.store.identity import id_defaults
    from gbcli.fs.safe import flatten

    checked = 0
    for kind in MODELS:
        for name in DATASETS:
            try:
                cfg = validate({"model": {"kind": kind}, "dataset": {"name": name}}, "test")
            except GbError:
                continue   # a kind that cannot use this dataset
            values, defaults = flatten(cfg.to_dict()), flatten(id_defaults(cfg))
            in_id = {k for k, v in values.items() if k in defaults and defaults[k] != v}
            in_id |= {k for k in values if k not in defaults}
            extra = {k for k in in_id if not k.startswith(("name", "output", "sweep", "svm.objectives"))}
            assert extra <= {"model.kind", "dataset.name", "dataset.val_size", "model.depth", "model.hidden_units"}, \
                (kind, name, sorted(extra))
            checked += 1
    assert checked >= 40


@pytest.mark.parametrize("section,key", _every_key(), ids=lambda v: v or "top")
def test_every_key_that_changes_a_result_changes_the_point_id(section, key):
    """For every config key of the schema: a key that changes what is computed gives
    another id when it changes; a key declared to change no result keeps the id."""
    if _declared(section, key, UNASSERTED):
        pytest.skip(next(v for k, v in UNASSERTED.items() if _declared(section, key, {k})))
    where = f"{section}.{key}" if section else key
    if key not in ALT and where not in ALT_BY_SECTION and key not in ("kind", "name"):
        pytest.fail(f"{where}: a new config key: give it an alternative value in ALT and decide whether it "
                    f"changes a result (NOT_RESULT)")
    base = validate(_base(section, key), "base")
    other = validate(_changed(section, key), f"{where} changed")
    assert other.to_dict() != base.to_dict(), f"{where}: the alternative value changes nothing in the config"
    if _declared(section, key, NOT_RESULT):
        assert point_id(other) == point_id(base), f"{where} is declared to change no result, but changes the id"
    else:
        assert point_id(other) != point_id(base), f"{where} changes what is computed but not the point's id"


def test_configs_differing_only_in_the_batch_seed_are_different_points():
    a = validate({"training": {"batch_seed": 1}}, "a")
    b = validate({"training": {"batch_seed": 2}}, "b")
    assert a.to_dict()["training"] | {"batch_seed": 0} == b.to_dict()["training"] | {"batch_seed": 0}
    assert point_id(a) != point_id(b)


def test_a_grid_over_batch_seeds_expands_to_one_point_per_seed(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({"name": "g", "model": {"kind": "relu"}, "grid": {"training.batch_seed": [1, 2, 3, 4]}}))
    _, points = expand(path)
    assert [p.training.batch_seed for p in points] == [1, 2, 3, 4]
    assert len({point_id(p) for p in points}) == 4


def test_the_momentum_order_grid_has_every_batch_order():
    """configs/paper/fig3-momentum-order.yaml: 3 N x 3 init seeds x 4 batch seeds, 36 distinct points."""
    path = REPO / "configs" / "paper" / "fig3-momentum-order.yaml"
    grid = yaml.safe_load(path.read_text())["grid"]
    _, points = expand(path)
    assert len(points) == math.prod(len(v) for v in grid.values()) == 36
    assert len({point_id(p) for p in points}) == 36
    assert sorted({p.training.batch_seed for p in points}) == grid["training.batch_seed"]


# =============================================================================================
# more decisions of the same kind (scripts/mutate.py's other mutations)


def test_a_tie_is_an_error():
    """Protocol section 4: predictions are sign(out), a tie (out = 0) counts as an error."""
    out, y = np.array([0.0, 2.0, -1.0, 0.0]), np.array([1.0, 1.0, 1.0, -1.0])
    assert error(out, y) == 0.75                                     # two ties and one wrong sign
    assert error(torch.tensor(out), torch.tensor(y)) == 0.75


def test_a_non_finite_output_is_an_error_whatever_its_sign():
    """A diverged network's +-inf or NaN output has no label (docs/run-directories.md): an error
    even where its sign matches, and a disagreement with every predictor, a non-finite one's too."""
    out, y = np.array([np.inf, -np.inf, np.nan, 1.0]), np.array([1.0, -1.0, 1.0, 1.0])
    assert error(out, y) == 0.75
    assert error(torch.tensor(out), torch.tensor(y)) == 0.75
    assert inconsistency(out, np.array([1.0, -1.0, 1.0, 1.0])) == 0.75
    assert inconsistency(out, out) == 0.75
    assert inconsistency(np.array([0.0, -2.0]), np.array([0.0, 3.0])) == 0.5   # a tie is a label of its own


def test_a_point_on_a_hyperplane_is_on_its_zero_side():
    """Protocol section 3: hyperplane j's bit is [w_j . x > b_j] (a point on it gives 0), and
    c = 2 b_0 + b_1 for k = 2 (hyperplane 0 the most significant bit)."""
    hp = Hyperplanes(np.array([[[1.0, 0.0], [0.0, 1.0]]]), np.array([[0.5, 0.25]]))   # H = 1, k = 2, D = 2
    x = np.array([[0.5, 1.0], [1.0, 0.25], [0.5, 0.25], [1.0, 1.0], [0.0, 0.0]])
    bits = [(0, 1), (1, 0), (0, 0), (1, 1), (0, 0)]                   # on hyperplane 0, on 1, on both, ...
    assert hp.local_contexts(x)[:, 0].tolist() == [2 * b0 + b1 for b0, b1 in bits]


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_context_sides_are_the_bits_of_the_context_hyperplane_0_first(k):
    """context_sides inverts context_index: context c's side of hyperplane j is bit k-1-j of c."""
    from gbcli.models.gating import context_index, context_sides

    c = np.arange(2 ** k)
    sides = context_sides(c, k)
    assert sides.tolist() == [[(int(v) >> (k - 1 - j)) & 1 for j in range(k)] for v in c]
    assert context_index(sides).tolist() == c.tolist()


def test_projections_sum_float32_inputs_in_float64_and_round_once():
    """float64 normals: the plain product. float32 normals (the published draws): the inputs rounded
    to float32, the products summed in float64, the sum rounded to float32 once."""
    from gbcli.models.gating import projections

    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((7, 300)), rng.standard_normal((3, 300))
    assert np.array_equal(projections(x, w), x @ w.T)
    w32 = w.astype(np.float32)
    want = (x.astype(np.float32).astype(np.float64) @ w32.astype(np.float64).T).astype(np.float32)
    got = projections(x, w32)
    assert got.dtype == np.float32 and np.array_equal(got, want)


@pytest.mark.parametrize("sampler", ["sample_hyperplanes", "published_hyperplanes"])
def test_offsets_are_the_medians_only_with_median_init(sampler):
    """contexts.median_init: offsets are the pool's median projections; without it, the drawn ones."""
    from gbcli.models import gating

    pool = np.random.default_rng(2).standard_normal((101, 6))
    with_median = getattr(gating, sampler)(3, 4, pool, seed=7, median_init=True)
    drawn = getattr(gating, sampler)(3, 4, pool, seed=7, median_init=False)
    assert np.array_equal(np.asarray(drawn.offsets), np.asarray(drawn.raw_offsets))
    proj = pool @ np.asarray(with_median.normals, np.float64).reshape(6, 6).T
    assert np.allclose(np.asarray(with_median.offsets, np.float64).reshape(-1), np.median(proj, axis=0),
                       rtol=1e-5, atol=1e-5)   # the published draws: float32
    assert not np.allclose(np.asarray(drawn.offsets, np.float64), np.asarray(with_median.offsets, np.float64))


@pytest.mark.parametrize("bad", [-1, 4])
def test_one_hot_refuses_a_context_out_of_range(bad):
    from gbcli.programs.design import one_hot

    assert one_hot(np.array([[0, 3]]), 4).tolist() == [[1, 0, 0, 0, 0, 0, 0, 1]]
    with pytest.raises(ValueError, match="contexts must be in 0..3"):
        one_hot(np.array([[0, bad]]), 4)


def test_the_gln_design_gates_row_h_times_c_plus_the_context():
    """Protocol section 5: zeta's rows are r = h*C + c, so point n's gates are the columns
    h*C + gamma_h(x_n), one per unit (the reference programs' groups depend on this order)."""
    cfg = validate({"dataset": {"name": "digits", "train_size": 100, "val_size": 100},
                    "model": {"kind": "gln", "hidden_units": 3}, "contexts": {"count": 4, "seed": 2}}, "test")
    problem = prepare(cfg)
    design = build_design("svm-gln", cfg, problem)
    h, c = 3, 4
    want = np.zeros((100, h * c))
    for n, contexts in enumerate(problem.ctx_train):
        for unit, ctx in enumerate(contexts):
            want[n, unit * c + ctx] = 1.0
    assert np.array_equal(design.e_train, want)
    assert [g.tolist() for g in design.groups] == [[u * c + k for k in range(c)] for u in range(h)]


def test_median_init_halves_the_pool_at_every_hyperplane():
    """Protocol section 3: each offset is the median of its hyperplane's projections over the whole
    pool (every image, not just the training points), so each hyperplane splits the data in half."""
    cfg = validate({"dataset": {"name": "digits", "train_size": 100, "val_size": 100},
                    "model": {"kind": "gln", "hidden_units": 3}, "contexts": {"count": 4, "seed": 2}}, "test")
    problem = prepare(cfg)
    hp, pool = problem.hyperplanes, problem.dataset.x_pool
    proj = np.einsum("hkd,nd->nhk", hp.normals.astype(np.float64), pool)
    np.testing.assert_allclose(hp.offsets, np.median(proj, axis=0), rtol=1e-12, atol=1e-12)
    above = (proj > hp.offsets).sum(0)
    assert np.all(np.abs(above - len(pool) / 2) <= 1), above          # 1797 images: 898 above each


def test_verify_recomputes_what_a_record_claims(run, tmp_path):
    cfg, out = run
    rows = verify(out)
    assert [(r["objective"], r["verified"], r["problems"]) for r in rows] == [("gd", True, []), ("svm-gln", True, [])]
    # a copy whose result.json claims the training error as its validation error
    copy_dir = tmp_path / "claims"
    shutil.copytree(out, copy_dir)
    result = copy_dir / "svm" / "svm-gln" / "result.json"
    record = json.loads(result.read_text())
    assert record["val_error"] != record["train_error"]
    result.write_text(json.dumps({**record, "val_error": record["train_error"]}))
    gd, svm = verify(copy_dir)
    assert gd["verified"] is True and svm["verified"] is False and any("val_error" in p for p in svm["problems"]), svm


def test_verify_calls_an_uncertified_predictor_inaccurate():
    design, sol = _solved("svm-gln")
    y_val = np.ones(len(design.x_val))
    assert check_solution(design, y_val, sol.zeta, sol.lam, "optimal", DEFAULT_CERTIFY_TOL)["status"] == "optimal"
    got = check_solution(design, y_val, -sol.zeta, sol.lam, "optimal", DEFAULT_CERTIFY_TOL)
    assert got["status"] == "inaccurate" and not got["certified"]


@pytest.mark.parametrize("draw", ["own", "published", "svm-rc"])
def test_median_hyperplanes_halve_an_odd_pool_and_its_median_image_takes_the_rules_side(draw):
    """With median offsets over an odd pool (digits: 1797 images) one image lies on each hyperplane.
    Its side is the rule's, [w.x > b] -> 0 (svm-rc's published [w.x >= b] -> 1), decided on the very
    products the median came from: each hyperplane has exactly (N - 1) / 2 (svm-rc: (N + 1) / 2) pool
    images on side 1, and a training or validation image is gated as it is in the pool (gating it
    with another product put one validation image of 400 on the other side)."""
    from gbcli.data.sources import ImageSet
    from gbcli.models.gating import published_hyperplanes, random_relu_gates, sample_hyperplanes

    ds = ImageSet(name="digits", train_size=300, val_size=400, data_seed=3).load()
    n = len(ds.x_pool)
    assert n % 2 == 1
    hp = {"own": lambda: sample_hyperplanes(3, 4, ds.x_pool, 2),
          "published": lambda: published_hyperplanes(3, 4, ds.x_pool, 2),
          "svm-rc": lambda: random_relu_gates(3, ds.x_pool, 2)}[draw]()
    on = hp.pool_sides.sum(0)
    assert (on == ((n + 1) // 2 if draw == "svm-rc" else (n - 1) // 2)).all(), on
