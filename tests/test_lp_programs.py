"""The lq max-margin programs of the optimizers' geometries (issue 50: `linf`, an LP, and `l1.5`, a
cone program, in gbcli.programs.norms): on small separable gated designs each is solved by the
registered primal solvers, certified by gb's own certificate (its dual bound from the margin
multipliers through the dual norm), and equals the same program written directly in cvxpy; the
dual norm and input radius are the ones their definitions give."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest

from gbcli.programs import GatedDesign, decision, solve_primal
from gbcli.programs.certify import certificate
from gbcli.programs.design import one_hot
from gbcli.programs.norms import NORMS


def design_of(norm: str, units: int = 2, count: int = 2, n: int = 30, dim: int = 5, seed: int = 0) -> GatedDesign:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n + 100, dim))
    e = one_hot(rng.integers(0, count, size=(n + 100, units)), count)
    y = np.sign(decision(rng.normal(size=(units * count, dim)), x, e))
    return GatedDesign(x[:n], y[:n], e[:n], x[n:], e[n:], norm, units=units, count=count)


def direct(design: GatedDesign, p) -> float:
    """min ||zeta||_p (all entries) s.t. y_n f(x_n) >= 1, written from the definition."""
    zeta = cp.Variable((design.rows, design.x_train.shape[1]))
    out = cp.sum(cp.multiply(design.e_train @ zeta, design.x_train), axis=1)
    objective = (cp.max(cp.abs(zeta)) if p == "inf" else cp.sum(cp.abs(zeta)) if p == 1
                 else cp.sum(cp.abs(zeta) ** p))   # ||zeta||_p^p: the same minimizer
    problem = cp.Problem(cp.Minimize(objective), [cp.multiply(design.y_train, out) >= 1])
    problem.solve()
    return problem.value if p in ("inf", 1) else problem.value ** (1 / p)


@pytest.mark.parametrize("norm, p", [("linf", "inf"), ("l1.5", 1.5)])
@pytest.mark.parametrize("solver", ["clarabel", "ecos"])
@pytest.mark.parametrize("units, count", [(1, 1), (2, 2), (3, 2)])
def test_each_program_is_certified_and_is_the_program_of_its_definition(norm, p, solver, units, count):
    design = design_of(norm, units, count, seed=units * 10 + count)
    sol = solve_primal(design, solver)
    cert = certificate(design, sol)
    assert sol.status == "optimal" and cert["certified"], cert
    assert cert["primal_objective"] == pytest.approx(direct(design, p), rel=1e-5)
    assert cert["dual_objective"] <= cert["primal_objective"] * (1 + 1e-6)   # weak duality, through the dual norm


def test_the_dual_norms_and_radii_are_their_definitions():
    rng = np.random.default_rng(3)
    design = design_of("linf", 2, 2)
    v = rng.normal(size=(design.rows, design.x_train.shape[1]))
    linf, l15 = NORMS["linf"], NORMS["l1.5"]
    assert linf.dual(design, v) == pytest.approx(np.abs(v).sum())
    assert l15.dual(design, v) == pytest.approx((np.abs(v) ** 3).sum() ** (1 / 3))   # q = 3 for p = 1.5
    for nrm, dual_p in ((linf, 1), (l15, 3)):
        # |f(x_n)| <= ||zeta|| radius for every zeta, attained by zeta aligned with one gated input
        radius = nrm.input_radius(design)
        grams = [np.outer(design.e_train[k], design.x_train[k]) for k in range(len(design.x_train))]
        assert radius == pytest.approx(max(np.linalg.norm(g.ravel(), dual_p) for g in grams))
        for _ in range(30):
            zeta = rng.normal(size=v.shape)
            assert np.abs(decision(zeta, design.x_train, design.e_train)).max() <= nrm.value(design, zeta) * radius * (1 + 1e-12)


def test_the_primal_solvers_declare_them_and_the_dual_and_osqp_do_not():
    from gbcli.programs.solvers import SOLVERS

    assert {name for name, s in SOLVERS.items() if "l1.5" in s.norms} == {"ecos", "clarabel", "scs"}
    for norm in ("linf", "l1"):
        assert {name for name, s in SOLVERS.items() if norm in s.norms} == {"ecos", "clarabel", "scs", "highs"}


@pytest.mark.parametrize("norm, p", [("linf", "inf"), ("l1", 1)])
@pytest.mark.parametrize("units, count", [(1, 1), (2, 2), (3, 2)])
def test_highs_solves_the_lps_to_a_vertex_with_a_tight_certificate(norm, p, units, count):
    """HiGHS, the LPs' default solver, ends with a far smaller gap than the cone solvers' 1e-6."""
    from gbcli.programs.solvers import SOLVERS, default_solver

    assert default_solver(norm) == "highs"
    design = design_of(norm, units, count, seed=units * 10 + count)
    sol = SOLVERS["highs"].solve(design)
    cert = certificate(design, sol, tol=1e-8)
    assert sol.status == "optimal" and cert["certified"], cert
    assert cert["primal_objective"] == pytest.approx(direct(design, p), rel=1e-5)


def test_highs_certifies_an_inseparable_lp_by_its_ray():
    """Labels that no gated predictor fits (a point and its copy with the other label): `infeasible`,
    certified by the margin multipliers' ray as every solver's infeasibility is."""
    from gbcli.programs.solvers import SOLVERS

    design = design_of("linf", 2, 2, seed=5)
    x, y, e = design.x_train.copy(), design.y_train.copy(), design.e_train.copy()
    x[1], e[1], y[1] = x[0], e[0], -y[0]
    for norm in ("linf", "l1"):
        bad = GatedDesign(x, y, e, design.x_val, design.e_val, norm, units=2, count=2)
        sol = SOLVERS["highs"].solve(bad)
        cert = certificate(bad, sol)
        assert sol.status == "infeasible" and sol.zeta is None and cert["certified"], cert
