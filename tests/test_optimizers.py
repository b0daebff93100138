"""The update rules beyond gradient descent (issue 50, gbcli.optimizers): each one's step is the
one its definition gives, and on a small separable linear problem each one's limit maximizes the
margin in its own geometry, as the theorems say (docs/optimizers.md): its normalized margin passes
0.99 of the lq max-margin program's (solved by cvxpy) within 3,000 steps, its predictions on fresh
points approach that program's, and the margin in the other geometries stays well below theirs."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from gbcli.optimizers import OPTIMIZERS, Mirror, Sign, SteepestL1, SteepestL2, geometry_of


def _params():
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    b = torch.randn(5, generator=gen, dtype=torch.float64)
    ga = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    gb = torch.randn(5, generator=gen, dtype=torch.float64)
    return a, b, ga, gb


def _stepped(cls, **settings):
    a, b, ga, gb = _params()
    pa, pb = a.clone(), b.clone()
    pa.grad, pb.grad = ga.clone(), gb.clone()
    cls([pa, pb], lr=0.1, **settings).step()
    return (pa - a, pb - b), (ga, gb)


def test_each_step_is_its_definition():
    """sign: -lr sign(g); l2: length lr along -g; l1: only the largest |g| of all parameters moves, by
    lr; mirror with p = 2: the gradient step itself, with p = 1.5: the step on sign(w) |w|^(1/2)."""
    (da, db), (ga, gb) = _stepped(Sign)
    assert torch.allclose(da, -0.1 * ga.sign()) and torch.allclose(db, -0.1 * gb.sign())
    (da, db), (ga, gb) = _stepped(SteepestL2)
    g = torch.cat([ga.view(-1), gb.view(-1)])
    assert torch.allclose(torch.cat([da.view(-1), db.view(-1)]), -0.1 * g / g.norm())
    (da, db), (ga, gb) = _stepped(SteepestL1)
    d = torch.cat([da.view(-1), db.view(-1)])
    top = int(g.abs().argmax())
    assert int((d != 0).sum()) == 1 and math.isclose(float(d[top]), -0.1 * float(g[top].sign()), rel_tol=1e-12)
    (da, db), (ga, gb) = _stepped(Mirror, p=2.0)
    assert torch.allclose(da, -0.1 * ga) and torch.allclose(db, -0.1 * gb)
    a, b, ga, gb = _params()
    (da, _), _ = _stepped(Mirror, p=1.5)
    u = a.sign() * a.abs() ** 0.5 - 0.1 * ga
    assert torch.allclose(a + da, u.sign() * u.abs() ** 2)
    with pytest.raises(ValueError, match="p = 1.0"):
        Mirror([a], lr=0.1, p=1.0)


def test_a_state_dict_round_trips_the_settings():
    a = torch.zeros(3, dtype=torch.float64)
    opt = Mirror([a], lr=0.3, p=1.25)
    other = Mirror([a.clone()], lr=1.0, p=1.5)
    other.load_state_dict(opt.state_dict())
    assert other.param_groups[0]["lr"] == 0.3 and other.param_groups[0]["p"] == 1.25
    assert set(OPTIMIZERS) == {"sgd", "adam", "sign", "steepest-l1", "steepest-l2", "mirror"}


def test_naming_an_optimizer_imports_no_torch():
    code = "import sys, gbcli.optimizers as o; o.geometry_of('sign', {}); assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


# ------------------------------------------------------------------ the theorems on a linear case

N, D = 5, 12   # fewer points than dimensions: the lq max-margin directions differ clearly


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    planted = rng.normal(size=D)
    x = rng.normal(size=(N, D))
    return x, np.sign(x @ planted), rng.normal(size=(2000, D))


def _max_margin(x, y, q):
    """The lq max-margin predictor; for the LPs (l1, l-infinity) checked to be the only one (two
    random directions over the optimal set reach the same point), so "its predictions" are defined."""
    import cvxpy as cp

    norm = "inf" if q == math.inf else q
    w = cp.Variable(x.shape[1])
    margins = [cp.multiply(y, x @ w) >= 1]
    best = cp.Problem(cp.Minimize(cp.norm(w, norm)), margins)
    best.solve()
    if q in (1.0, math.inf):
        rng = np.random.default_rng(1)
        ends = []
        for _ in range(2):
            cp.Problem(cp.Minimize(rng.normal(size=x.shape[1]) @ w),
                       margins + [cp.norm(w, norm) <= best.value * (1 + 1e-7)]).solve()
            ends.append(w.value)
        assert np.allclose(*ends, atol=1e-4 * np.abs(ends[0]).max()), f"the l{q} max-margin point is not unique"
    best.solve()
    return w.value


def _ratio(w, x, y, q, best):
    """The normalized lq margin of w over the program's."""
    return ((y * (x @ w)).min() / np.linalg.norm(w, q)) / ((y * (x @ best)).min() / np.linalg.norm(best, q))


@pytest.mark.parametrize("name, lr, settings", [("sign", 0.02, {}), ("steepest-l1", 0.05, {}),
                                                ("steepest-l2", 0.05, {}), ("mirror", 0.2, {"p": 1.5})])
def test_each_limit_maximizes_the_margin_of_its_geometry(problem, name, lr, settings):
    x, y, fresh = problem
    q = geometry_of(name, settings)
    geometries = sorted({1.0, 2.0, math.inf, q})
    best = {g: _max_margin(x, y, g) for g in geometries}
    w = torch.zeros(D, dtype=torch.float64, requires_grad=True)
    opt = OPTIMIZERS[name]([w], lr=lr, **settings)
    xt, yt = torch.tensor(x), torch.tensor(y)
    for _ in range(3000):   # on log R, R the mean exponential loss (gb's loss-normalized step)
        opt.zero_grad()
        torch.logsumexp(-yt * (xt @ w), 0).backward()
        opt.step()
    w = w.detach().numpy()
    ratio = {g: _ratio(w, x, y, g, best[g]) for g in geometries}
    disagree = {g: float(np.mean(np.sign(fresh @ w) != np.sign(fresh @ best[g]))) for g in geometries}
    assert ratio[q] > 0.99 and disagree[q] < 0.02, (ratio, disagree)
    for g in geometries:
        if g != q:   # not the other programs' limit
            assert ratio[g] < 0.98 and disagree[g] > disagree[q], (g, ratio, disagree)


# ------------------------------------------------------------------ through gb: config, loop, tracker

TEACHER = {"name": "linear-teacher", "n_samples": 300, "train_size": 8, "val_size": 200, "dim": 20, "margin": 0.3,
           "max_norm": 1.0}   # 8 points in 20 dimensions: each lq max-margin program's optimum is its own


@pytest.mark.parametrize("optimizer, lr, steps, program", [
    ("sgd", 1.0, 5000, "svm-shallow"), ("steepest-l2", 0.2, 5000, "svm-shallow"),
    ("steepest-l1", 0.2, 10000, "svm-l1"), ("mirror", 0.5, 3000, "svm-l1.5"), ("sign", 0.05, 20000, "svm-linf"),
    ("adam", 0.3, 60000, "svm-linf")])
def test_gb_tracks_each_optimizer_against_the_program_of_its_geometry(tmp_path, optimizer, lr, steps, program):
    """`gb train-gd` of a linear model with `training.optimizer` and the margin, agreement and contrast
    instruments: the tracked margin ratio (the normalized margin in the optimizer's geometry over
    its program's) passes 0.99 and the inconsistency with that program's predictor on the validation
    set reaches 0 within `steps` full-batch steps on log R (loss-normalized; each budget is at least
    a third above the step where it first did, docs/optimizers.md); the
    ratio against the l2 SVM stays below 0.99, and the network disagrees more with the l2 SVM than with
    its own program, for the optimizers of other geometries."""
    import pandas as pd

    from gbcli.config import validate
    from gbcli.registry import MODELS
    from gbcli.runs.stages import train_gd

    cfg = validate({"dataset": TEACHER, "model": {"kind": "linear"},
                    "training": {"batch_size": None, "epochs": steps, "loss": "exponential", "lr": lr,
                                 "optimizer": optimizer, "step_rule": "loss-normalized",
                                 "track": ["margin", "agreement", "contrast"], "log_points": 5}})
    assert MODELS["linear"].matching_program(cfg) == program
    train_gd(cfg, tmp_path, progress=False)
    last = pd.read_csv(tmp_path / "gd" / "metrics.csv").iloc[-1]
    assert last["margin_ratio"] > 0.99 and last["inconsistency"] == 0, last.to_dict()
    # the contrast with gradient descent's program (the l2 SVM): the same numbers in the l2 geometry,
    # clearly below in another
    if program == "svm-shallow":
        assert last["margin_ratio_l2"] == pytest.approx(last["margin_ratio"], rel=1e-9), last.to_dict()
        assert last["inconsistency_l2"] == last["inconsistency"]
    else:
        assert last["margin_ratio_l2"] < 0.99 and last["inconsistency_l2"] > last["inconsistency"], last.to_dict()


def test_a_config_refuses_the_settings_of_another_optimizer():
    from gbcli.config import validate
    from gbcli.errors import GbError

    base = {"dataset": TEACHER, "model": {"kind": "linear"}}
    for training, says in (({"optimizer": "sign", "mirror_p": 1.2}, "training.mirror_p: is for training.optimizer: mirror"),
                           ({"optimizer": "mirror", "momentum": 0.9}, "training.momentum: is for training.optimizer: sgd"),
                           ({"optimizer": "adam", "betas": [0.9, 1.0]}, "training.betas: each must be in [0, 1)"),
                           ({"optimizer": "sgd", "eps": 1e-8}, "training.eps: is for training.optimizer: adam")):
        with pytest.raises(GbError, match=re.escape(says)):
            validate({**base, "training": training})


def _gln_problem(seed: int, units: int = 2, count: int = 2, n: int = 8, dim: int = 3):
    """A small GLN design: random contexts, labels from a random GLN (so separable)."""
    from gbcli.programs.design import GatedDesign, decision, one_hot, unit_groups

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim))
    ctx = rng.integers(0, count, size=(n, units))
    e = one_hot(ctx, count)
    y = np.sign(decision(rng.normal(size=(units * count, dim)), x, e))
    return x, y, ctx, lambda norm: GatedDesign(x, y, e, x, e, norm, unit_groups(units, count), units, count)


def _parameter_problem(out, k: int, y, q, restarts, seed):
    """min ||theta||_q^2 over k weights s.t. y_n out(theta)_n >= 1, solved directly by SLSQP from random
    starts (l-infinity through its epigraph t >= |theta_i|): the best local optimum."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(seed)
    best = math.inf
    for _ in range(restarts):
        t0 = rng.normal(size=k) * 3
        t0 *= 1.5 / max(np.min(y * out(t0)), 1e-3) ** 0.5 if np.min(y * out(t0)) > 0 else 1.0
        if q == math.inf:
            cons = [{"type": "ineq", "fun": lambda v: y * out(v[:-1]) - 1},
                    {"type": "ineq", "fun": lambda v: v[-1] - np.abs(v[:-1])}]
            r = minimize(lambda v: v[-1], np.append(t0, np.abs(t0).max()), method="SLSQP", constraints=cons,
                         options={"maxiter": 500, "ftol": 1e-12})
            value = r.x[-1] ** 2 if r.success else math.inf
            feasible = r.success and np.min(y * out(r.x[:-1])) >= 1 - 1e-6 and np.abs(r.x[:-1]).max() <= r.x[-1] + 1e-6
        else:
            r = minimize(lambda v: v @ v, t0, method="SLSQP", constraints=[{"type": "ineq", "fun": lambda v: y * out(v) - 1}],
                         options={"maxiter": 500, "ftol": 1e-12})
            value, feasible = r.fun, r.success and np.min(y * out(r.x)) >= 1 - 1e-6
        if feasible:
            best = min(best, value)
    return best


def _gln_out(x, ctx, units, count):
    """The GLN's outputs as a function of its weights flattened (w1: H x C x D, then w2: H)."""
    d = x.shape[1]

    def out(theta):
        w1, w2 = theta[:-units].reshape(units, count, d), theta[-units:]
        return np.einsum("h,nhd,nd->n", w2, w1[np.arange(units)[None, :], ctx], x)

    return out, units * count * d + units


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_gln_programs_induced_by_l2_and_linf_on_the_weights_are_the_convex_ones(seed):
    """docs/optimizers.md: min ||theta||_2^2 at margin 1 is 2 x svm-gln's optimum, and min ||theta||_inf^2 is
    svm-gln-linf's (the l-infinity LP on zeta), checked against the parameter problem solved directly."""
    from gbcli.programs.certify import certificate
    from gbcli.programs.solvers import solve

    units, count = 2, 2
    x, y, ctx, design = _gln_problem(seed, units, count)
    from gbcli.registry import MODELS

    programs = MODELS["gln"].programs
    assert programs["svm-gln-linf"].norm == "linf" and programs["svm-gln"].norm == "group"
    for norm, q, factor in (("group", 2.0, 2.0), ("linf", math.inf, 1.0)):
        d = design(norm)
        sol = solve(d)
        assert sol.status == "optimal" and certificate(d, sol)["certified"]
        direct = _parameter_problem(*_gln_out(x, ctx, units, count), y, q, restarts=20, seed=seed)
        assert direct == pytest.approx(factor * sol.value, rel=1e-4), (norm, direct, sol.value)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_diagonal_programs_induced_by_l2_and_linf_on_the_weights_are_the_convex_ones(seed):
    """docs/optimizers.md: for the depth-2 linear diagonal network f = <w_1 o w_2, x>, min ||theta||_2^2 at
    margin 1 is 2 x svm-diag-l1's optimum (min ||beta||_1) and min ||theta||_inf^2 is svm-diag-linf's,
    checked against the parameter problem solved directly."""
    from gbcli.models.linear import feature_design
    from gbcli.programs.certify import certificate
    from gbcli.programs.solvers import solve
    from gbcli.registry import MODELS

    rng = np.random.default_rng(seed)
    n, d = 6, 4
    x = rng.normal(size=(n, d))
    y = np.sign(x @ rng.normal(size=d))
    programs = MODELS["diagonal"].programs
    for name, q, factor in (("svm-diag-l1", 2.0, 2.0), ("svm-diag-linf", math.inf, 1.0)):
        design = feature_design(x, y, x, programs[name].norm)
        sol = solve(design)
        assert sol.status == "optimal" and certificate(design, sol)["certified"]
        direct = _parameter_problem(lambda t: x @ (t[:d] * t[d:]), 2 * d, y, q, restarts=20, seed=seed)
        assert direct == pytest.approx(factor * sol.value, rel=1e-4), (name, direct, sol.value)


def test_a_diagonal_network_tracks_and_gb_verifies_its_induced_programs(tmp_path):
    """`gb train-gd` of a depth-2 linear diagonal network tracks its margin against the program its
    optimizer's geometry induces, `gb fit-svm` certifies both induced programs and `gb verify` re-checks
    them; a deeper network or the ReLU is refused those programs."""
    import pandas as pd
    import yaml

    import forked_gb
    from gbcli.config import validate
    from gbcli.errors import GbError
    from gbcli.registry import MODELS

    dim = TEACHER["dim"]
    model = {"kind": "diagonal", "depth": 2, "activation": "linear", "weights": {"w": [[0.1] * dim, [0.0] * dim]}}
    training = {"batch_size": None, "epochs": 300, "loss": "exponential", "lr": 0.01, "optimizer": "sign",
                "step_rule": "loss-normalized", "track": ["margin", "agreement"], "log_points": 3}
    raw = {"name": "diag", "dataset": TEACHER, "model": model, "training": training,
           "svm": {"objectives": ["svm-diag-l1", "svm-diag-linf"]}}
    cfg = validate(raw)
    assert MODELS["diagonal"].matching_program(cfg) == "svm-diag-linf"
    assert MODELS["diagonal"].matching_program(validate({**raw, "training": {**training, "optimizer": "sgd"}})) \
        == "svm-diag-l1"
    for bad in ({**model, "activation": "relu"}, {**model, "depth": 3, "weights": {"w": [[0.1] * dim] * 3}}):
        with pytest.raises(GbError, match="svm.objectives: svm-diag-l1 is the program of a depth-2 diagonal"):
            validate({**raw, "model": bad, "training": {**training, "track": []}})
        with pytest.raises(GbError, match="training.track: margin needs a matching convex program"):
            validate({**raw, "model": bad, "svm": {}})
    (tmp_path / "diag.yaml").write_text(yaml.safe_dump(raw))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for args in (["train-gd", "diag.yaml", "-q", "--out", "run"], ["fit-svm", "diag.yaml", "-q", "--out", "run"],
                 ["verify", "run"]):
        p = forked_gb.run(args, tmp_path, env, timeout=600, argv0=forked_gb.CLI)
        assert p.returncode == 0, (args, p.stdout, p.stderr)
    assert "3 of 3 verified" in p.stdout, p.stdout
    metrics = pd.read_csv(tmp_path / "run" / "gd" / "metrics.csv")
    assert metrics["margin_ratio"].iloc[-1] > 0.5 and metrics["inconsistency"].iloc[-1] < 0.5, metrics
