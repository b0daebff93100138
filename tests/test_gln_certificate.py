"""The certificate of GD's limit for the 2-layer GLN (issue 47, docs/gln-certificate.md).

- The KKT residual of the parameter problem min ||w||^2 / 2 s.t. y f >= 1, term by term, against an
  independent computation from the definitions (per-sample gradients by central differences of a
  network written here), including points where only one layer's stationarity fails.
- The reduction to svm-gln by brute force on tiny problems: svm-gln solved by gb's certified solver
  (its value checked against cvxpy), the parameter problem by a local solver from many starts; a
  KKT point with all units alive is svm-gln's optimum at twice its value; one with a dead unit whose
  dual norm exceeds 1 is not (its value is strictly higher), and one whose dead unit's dual norm is
  at most 1 is.
- The columns in a real training run's metrics.csv.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from gbcli.instruments.gln_certificate import COLUMNS, Limit, certify
from gbcli.programs.certify import certificate
from gbcli.programs.design import GatedDesign, one_hot, unit_groups
from gbcli.programs.solvers import solve

import forked_gb

# ---------------------------------------------------------------- an independent GLN, from the definitions


def net(theta: np.ndarray, x: np.ndarray, ctx: np.ndarray, units: int, count: int) -> np.ndarray:
    """f(x_n) = sum_h w2[h] <w1[h*C + ctx[n, h]], x_n>, one point and one unit at a time; theta is
    w1 (row-major, H*C x D) followed by w2 (H)."""
    dim = x.shape[1]
    w1, w2 = theta[:units * count * dim].reshape(units * count, dim), theta[units * count * dim:]
    out = np.zeros(len(x))
    for n in range(len(x)):
        for h in range(units):
            out[n] += w2[h] * float(np.dot(w1[h * count + ctx[n, h]], x[n]))
    return out


def reference(w1, w2, x, y, ctx, lam) -> dict:
    """Every term of the certificate, computed from the definitions: rescale to margin 1, gradients
    of f by central differences (f is quadratic in the weights: exact up to rounding), the residual
    w - sum_n lam_n y_n grad f(x_n) split by layer, and the dual blocks g_h by a loop over points."""
    units, count, dim = len(w2), w1.shape[0] // len(w2), x.shape[1]
    theta = np.concatenate([w1.ravel(), w2])
    q = y * net(theta, x, ctx, units, count)
    theta = theta / np.sqrt(q.min())
    margins = q / q.min()
    grads = np.zeros((len(x), len(theta)))
    eps = 1e-3
    for i in range(len(theta)):
        step = np.zeros(len(theta))
        step[i] = eps
        grads[:, i] = (net(theta + step, x, ctx, units, count) - net(theta - step, x, ctx, units, count)) / (2 * eps)
    r = theta - (lam * y) @ grads
    split = units * count * dim
    norm = np.linalg.norm(theta)
    s1, s2 = np.linalg.norm(r[:split]) / norm, np.linalg.norm(r[split:]) / norm
    comp = float(lam @ (margins - 1)) / float(np.abs(lam) @ margins)
    infeas = float(np.maximum(-lam, 0).sum() / np.abs(lam).sum())
    g = np.zeros((units, count, dim))
    for n in range(len(x)):
        for h in range(units):
            g[h, ctx[n, h]] += lam[n] * y[n] * x[n]
    big_w, v = theta[:split].reshape(units, count, dim), theta[split:]
    return {"w1": s1, "w2": s2, "comp": comp, "infeas": infeas, "total": np.hypot(s1, s2) + abs(comp) + infeas,
            "unit_norms": np.sqrt((big_w ** 2).sum(axis=(1, 2)) + v ** 2),
            "dual_norms": np.sqrt((g ** 2).sum(axis=(1, 2)))}


def tiny(seed: int, n: int = 12, dim: int = 3, units: int = 5, count: int = 2):
    """Random data, labels and contexts; svm-gln solved by gb's solver (certified)."""
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(n, dim)), np.sign(rng.normal(size=n))
    ctx = rng.integers(0, count, size=(n, units))
    e = one_hot(ctx, count)
    design = GatedDesign(x, y, e, x, e, "group", unit_groups(units, count), units, count)
    sol = solve(design)
    assert certificate(design, sol)["certified"], sol.message
    return x, y, ctx, design, sol


def balanced(zeta: np.ndarray, units: int):
    """The parameter point of a predictor zeta (H*C, D): v_h = sqrt(||zeta_h||), W_h = zeta_h / v_h
    (a unit with zeta_h = 0 is dead: v_h = 0, W_h = 0)."""
    blocks = zeta.reshape(units, -1, zeta.shape[1])
    v = np.sqrt(np.linalg.norm(blocks, axis=(1, 2)))
    w1 = np.where(v[:, None, None] > 0, blocks / np.where(v > 0, v, 1)[:, None, None], 0.0)
    return w1.reshape(zeta.shape), v


def value(w1, w2) -> float:
    return float((w1 ** 2).sum() + (w2 ** 2).sum())


def check_terms(cert, ref):
    assert cert.stationarity_w1 == pytest.approx(ref["w1"], rel=1e-6, abs=1e-9)
    assert cert.stationarity_w2 == pytest.approx(ref["w2"], rel=1e-6, abs=1e-9)
    assert cert.complementarity == pytest.approx(ref["comp"], rel=1e-9, abs=1e-12)
    assert cert.dual_infeasibility == pytest.approx(ref["infeas"], rel=1e-9, abs=1e-12)
    assert cert.kkt_residual == pytest.approx(ref["total"], rel=1e-6, abs=1e-9)
    np.testing.assert_allclose(cert.unit_norms, ref["unit_norms"], rtol=1e-9)
    np.testing.assert_allclose(cert.dual_norms, ref["dual_norms"], rtol=1e-9)


# ---------------------------------------------------------------- the residual, term by term


def test_every_term_of_the_residual_at_a_generic_point_matches_the_definitions():
    """A random network (labels its own signs, so every margin is positive) and multipliers with a
    negative entry and mass on points off the margin: each term is non-zero and equals the reference."""
    rng = np.random.default_rng(0)
    units, count, dim, n = 3, 2, 4, 10
    w1, w2 = rng.normal(size=(units * count, dim)), rng.normal(size=units)
    x, ctx = rng.normal(size=(n, dim)), rng.integers(0, count, size=(n, units))
    y = np.sign(net(np.concatenate([w1.ravel(), w2]), x, ctx, units, count))
    lam = rng.uniform(0, 1, size=n)
    lam[3] = -0.2
    cert = certify(w1, w2, x, y, ctx, lam=lam)
    ref = reference(w1, w2, x, y, ctx, lam)
    assert min(ref["w1"], ref["w2"], ref["comp"], ref["infeas"]) > 1e-3   # every term is exercised
    check_terms(cert, ref)
    assert certify(w1, w2, x, -y, ctx) is None   # a misclassified point: no certificate


def test_a_point_where_only_the_second_layers_stationarity_fails_has_that_residual():
    """W_h = v_h g_h(lam) holds exactly (layer 1; it survives the rescaling to margin 1) but the
    layers are unbalanced, v_h != <W_h, g_h(lam)>: the residual is layer 2's alone, and not 0. A
    residual that left layer 2 out would read 0 here."""
    x, y, ctx, design, sol = tiny(2)
    units, count = design.units, design.count
    w1, v = balanced(sol.zeta, units)
    lam = 1.1 * sol.lam
    w1 = 1.1 * w1                     # = v_h g_h(1.1 mu): g_h(mu) = W_h / v_h at svm-gln's optimum
    cert = certify(w1, v, x, y, ctx, lam=lam)
    ref = reference(w1, v, x, y, ctx, lam)
    check_terms(cert, ref)
    assert cert.stationarity_w1 < 1e-6 and cert.stationarity_w2 > 0.05
    assert cert.heading() is Limit.NOT_NEAR_KKT
    # the general `kkt` instrument (NNLS over all multipliers) also sees it: no lam makes it stationary
    assert gb_kkt(w1, v, x, y, ctx, count) > 1e-2


def test_a_point_where_only_the_first_layers_stationarity_fails_has_that_residual():
    """svm-gln's balanced optimum plus, in each unit, a direction orthogonal to g_h(mu): v_h =
    <W_h, g_h(mu)> still holds (layer 2) but W_h != v_h g_h(mu) (layer 1)."""
    x, y, ctx, design, sol = tiny(2)
    units, count = design.units, design.count
    w1, v = balanced(sol.zeta, units)
    blocks = w1.reshape(units, count, -1)
    g = blocks / v[:, None, None]
    p = np.random.default_rng(1).normal(size=blocks.shape)
    p -= (np.einsum("hcd,hcd->h", p, g) / np.einsum("hcd,hcd->h", g, g))[:, None, None] * g
    w1 = (blocks + 0.01 * p).reshape(w1.shape)
    cert = certify(w1, v, x, y, ctx, lam=sol.lam)
    ref = reference(w1, v, x, y, ctx, sol.lam)
    check_terms(cert, ref)
    assert cert.stationarity_w2 < 1e-6 and cert.stationarity_w1 > 1e-3
    assert gb_kkt(w1, v, x, y, ctx, count) > 1e-3
    assert gb_kkt(*balanced(sol.zeta, units), x, y, ctx, count) < 1e-4   # and 0 at the optimum


def gb_kkt(w1, w2, x, y, ctx, count) -> float:
    """The `kkt` instrument's residual (NNLS multipliers, torch gradients) of this network."""
    from gbcli.instruments.core import kkt_residual
    from gbcli.models.networks.gln import DeepGLN

    model = DeepGLN(len(w2), count, x.shape[1], output_bias=False).double()
    with torch.no_grad():
        model.w1.copy_(torch.as_tensor(w1))
        model.w2.copy_(torch.as_tensor(w2)[None, :])
    t = torch.as_tensor
    return kkt_residual(model, t(x), t(y), t(ctx), 2)["kkt_residual"]


# ---------------------------------------------------------------- the reduction, by brute force


def svm_gln_by_cvxpy(x, y, ctx, units, count) -> float:
    import cvxpy as cp

    e = one_hot(ctx, count)
    z = cp.Variable((units * count, x.shape[1]))
    margins = cp.hstack([y[n] * cp.sum(cp.multiply(z, np.outer(e[n], x[n]))) for n in range(len(x))])
    obj = sum(cp.norm(z[h * count:(h + 1) * count], "fro") for h in range(units))
    prob = cp.Problem(cp.Minimize(obj), [margins >= 1])
    prob.solve(solver=cp.CLARABEL)
    return float(prob.value)


def local_parameter_solves(x, y, ctx, units, count, starts: int) -> list[float]:
    """min ||w||^2 s.t. y f >= 1 by SLSQP from random starts (scaled to margin 1 first): the values
    of the local solutions that converged and are feasible."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(0)
    dim = x.shape[1]
    size = units * count * dim + units
    phi = np.zeros((len(x), units, count, dim))            # phi[n, h] = x_n in row ctx[n, h]
    for n in range(len(x)):
        for h in range(units):
            phi[n, h, ctx[n, h]] = x[n]
    split = lambda t: (t[:-units].reshape(units, count, dim), t[-units:])

    def margins(t):
        w, v = split(t)
        return y * np.einsum("nhcd,hcd,h->n", phi, w, v)

    def jac(t):   # d margin_n / d W_h = y_n v_h phi_h(x_n), d margin_n / d v_h = y_n <W_h, phi_h(x_n)>
        w, v = split(t)
        return y[:, None] * np.concatenate([(phi * v[None, :, None, None]).reshape(len(x), -1),
                                            np.einsum("nhcd,hcd->nh", phi, w)], 1)

    out = []
    for _ in range(starts):
        res = minimize(lambda t: t @ t, rng.normal(size=size), jac=lambda t: 2 * t, method="SLSQP",
                       constraints=[{"type": "ineq", "fun": lambda t: margins(t) - 1, "jac": jac}],
                       options={"maxiter": 1000, "ftol": 1e-10})
        assert np.allclose(margins(res.x), y * net(res.x, x, ctx, units, count))   # the same network
        if res.success and margins(res.x).min() >= 1 - 1e-6:
            out.append(float(res.fun))
    return out


def test_all_units_alive_kkt_point_is_svm_glns_optimum_at_twice_its_value():
    x, y, ctx, design, sol = tiny(2)
    units, count = design.units, design.count
    assert sol.value == pytest.approx(svm_gln_by_cvxpy(x, y, ctx, units, count), rel=1e-5)
    w1, v = balanced(sol.zeta, units)
    for lam in (sol.lam, "nnls"):    # svm-gln's multipliers are the parameter problem's; NNLS finds them
        cert = certify(w1, v, x, y, ctx, lam=lam)
        assert cert.kkt_residual < 1e-4 and not cert.dead.any(), lam
        np.testing.assert_allclose(cert.dual_norms, 1, atol=1e-4)
        assert cert.heading() is Limit.SVM_GLN
        assert cert.lam.sum() == pytest.approx(sol.value, rel=1e-4)   # 1'lam = the group norm at margin 1
    assert value(w1, v) == pytest.approx(2 * sol.value, rel=1e-6)
    # the parameter problem itself, by a local solver from many starts: never below 2 x svm-gln's
    # optimum (AM-GM: v^2 + ||W||^2 >= 2 ||v W||), and its best local solution reaches it
    found = local_parameter_solves(x, y, ctx, units, count, starts=12)
    assert len(found) >= 6
    assert min(found) >= 2 * sol.value * (1 - 1e-5)
    assert min(found) == pytest.approx(2 * sol.value, rel=1e-3)


def restricted(design: GatedDesign, off: int):
    """svm-gln with unit `off` forced to zero (solved without it), as a full-size zeta."""
    c = design.count
    keep = np.array([i for i in range(design.rows) if i // c != off])
    sub = dataclasses.replace(design, e_train=design.e_train[:, keep], e_val=design.e_val[:, keep],
                              groups=unit_groups(design.units - 1, c), units=design.units - 1)
    sol = solve(sub)
    assert certificate(sub, sol)["certified"], sol.message
    zeta = np.zeros((design.rows, design.x_train.shape[1]))
    zeta[keep] = sol.zeta
    return zeta, sol


def test_a_dead_unit_whose_dual_norm_exceeds_1_is_a_kkt_point_that_is_not_svm_glns_optimum():
    """Unit k (svm-gln's largest) forced to zero: the restricted optimum, as a parameter point with
    unit k dead, is a KKT point of the parameter problem (residual 0), but ||g_k(lam)|| > 1, the
    certificate names unit k, and its value is strictly above 2 x svm-gln's optimum."""
    x, y, ctx, design, sol = tiny(2)
    units = design.units
    k = int(np.argmax(np.linalg.norm(sol.zeta.reshape(units, design.count, -1), axis=(1, 2))))
    zeta, sub = restricted(design, k)
    w1, v = balanced(zeta, units)
    for lam in (np.asarray(sub.lam), "nnls"):
        cert = certify(w1, v, x, y, ctx, lam=lam)
        assert cert.kkt_residual < 1e-4, lam
        assert list(np.flatnonzero(cert.dead)) == [k]
        dual, unit = cert.max_dead
        assert unit == k and dual > 1.01
        assert cert.heading() is Limit.DEAD_UNIT_VIOLATES
        cols = cert.columns()
        assert cols["max_dead_dual_unit"] == k and cols["dead_units"] == 1 and cols["min_unit_norm"] == 0
    assert value(w1, v) == pytest.approx(2 * sub.value, rel=1e-6)
    assert sub.value > sol.value * 1.01      # strictly worse than svm-gln: not its optimum


def test_a_dead_unit_whose_dual_norm_is_at_most_1_coincides_with_svm_glns_optimum():
    """A problem where svm-gln's optimum leaves unit 3 at zero: solved without unit 3 the value is
    svm-gln's, and the point, with unit 3 dead, is certified as svm-gln's (its dual norm < 1)."""
    x, y, ctx, design, sol = tiny(0)
    units, dead = design.units, 3
    assert np.linalg.norm(sol.zeta.reshape(units, design.count, -1)[dead]) < 1e-6   # the case tests it
    zeta, sub = restricted(design, dead)
    assert sub.value == pytest.approx(sol.value, rel=1e-6)
    w1, v = balanced(zeta, units)
    cert = certify(w1, v, x, y, ctx, lam="nnls")
    dual, unit = cert.max_dead
    assert cert.kkt_residual < 1e-4 and unit == dead and dual < 0.9
    assert cert.heading() is Limit.SVM_GLN
    assert value(w1, v) == pytest.approx(2 * sol.value, rel=1e-5)


# ---------------------------------------------------------------- in training


def test_gd_held_at_a_dead_unit_is_named_as_violating_svm_glns_conditions():
    """Normalized GD with unit 1 zero from the start (it stays zero: see test_convergence): the run
    approaches a KKT point (residual falling, small at the end) whose dead unit 1 has dual norm > 1;
    a run with one unit approaches svm-gln's optimum, its dual mass that optimum."""
    from test_convergence import tracked_training

    _, _, tracker, _, m = tracked_training(2, dead=1)
    last = m.iloc[-1]
    assert last["gln_kkt_residual"] < 0.02 and last["gln_kkt_residual"] < m["gln_kkt_residual"].iloc[-4]
    assert last["dead_units"] == 1 and last["max_dead_dual_unit"] == 1 and last["max_dead_dual_norm"] > 1.2
    _, _, tracker, _, m = tracked_training(1)
    last = m.iloc[-1]
    assert last["gln_kkt_residual"] < 0.02 and last["dead_units"] == 0 and np.isnan(last["max_dead_dual_norm"])
    assert last["gln_dual_mass"] == pytest.approx(tracker.against["svm-gln"]["opt"], rel=0.01)


def test_the_columns_are_in_a_real_training_runs_metrics(tmp_path):
    """`gb train-gd` with `track: [convergence]`: every certificate column in metrics.csv, finite at
    every logged step where the data are separated (NaN before), and gd/units.csv at the end."""
    import yaml

    from test_convergence import GAUSS

    cfg = {**GAUSS, "model": {"kind": "gln", "hidden_units": 3, "output_bias": False},
           "training": {**GAUSS["training"], "epochs": 200, "log_points": 8}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    p = forked_gb.run(["train-gd", "c.yaml", "--out", "r", "-q"], tmp_path, timeout=600, argv0=forked_gb.CLI)
    assert p.returncode == 0, p.stdout + p.stderr
    m = pd.read_csv(tmp_path / "r" / "gd" / "metrics.csv")
    sep = m[m["train_error"] == 0]
    assert len(sep) >= 3 and sep.index[-1] == m.index[-1]
    for col in COLUMNS:
        values = sep[col] if col not in ("max_dead_dual_norm", "max_dead_dual_unit", "softmin_max_dead_dual_norm") \
            else sep[col][sep["dead_units"] > 0]
        assert np.isfinite(values).all(), col
    assert ((sep["min_unit_norm"] > 0) & (sep["min_unit_norm"] <= 1)).all()
    units = pd.read_csv(tmp_path / "r" / "gd" / "units.csv")
    assert list(units["unit"]) == [0, 1, 2] and units["relative_norm"].max() == pytest.approx(1.0)
    assert np.isfinite(units["dual_norm"]).all()
