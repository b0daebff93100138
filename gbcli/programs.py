"""The convex max-margin programs (protocol section 5) and their primal solution with cvxpy.

Every program has the same shape. A gated design assigns each input x_n a row of gates
E[n, r] (one-hot per unit for GLN contexts, 0/1 for ReLU gates, a constant column for an
always-on unit), the predictor is f(x_n) = sum_r E[n, r] <zeta_r, x_n>, and the program is

    min  norm(zeta)   s.t.   y_n f(x_n) >= 1  for every training point n.

The programs differ only in the design and in the norm:
- `sq`:        sum_r ||zeta_r||^2                         (svm-shallow, svm-hl, svm-gates)
- `l2`:        zeta' M zeta = ||sum_r zeta_r||^2 + C ||(I - P) zeta||^2
               (the L2 norm of all C^H predictors divided by C^(H-2); svm-l2)
- `group`:     sum over groups of ||zeta_group||_F         (svm-gln, svm-rc, svm-lc, svm-gln-reference)
- `l2-reference`: ||A_ref zeta||^2 with the published code's A_ref (svm-l2-reference)
- `l1`:        sum of |zeta| entries, an LP: the l1 margin that coordinate descent / AdaBoost
               maximize (paper 004; svm-l1, linear model)
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

# norm of each objective; the design is built in `pipeline.build_design`
NORM_OF = {
    "svm-shallow": "sq", "svm-hl": "sq", "svm-gates": "sq",
    "svm-l2": "l2", "svm-l2-reference": "l2-reference",
    "svm-gln": "group", "svm-gln-reference": "group", "svm-rc": "group", "svm-lc": "group",
    "svm-l1": "l1",
    "svm-pos": "sq", "svm-neg": "sq", "svm-par": "sq",   # papers 001 and 002: linear SVMs (pipeline.paper_design)
}
QUADRATIC = {"sq", "l2", "l2-reference"}
# the dual solver (gbcli.dual) covers every norm but l1 (an LP: Clarabel); the degenerate
# l2-reference through an exact reduction to the few training points its objective constrains
# (gbcli.dual.solve_l2_reference)
DEFAULT_SOLVER = {"sq": "dual", "l2": "dual", "l2-reference": "dual", "group": "dual", "l1": "clarabel"}
DEFAULT_MAX_ITERS = {"osqp": 10_000, "ecos": 200, "clarabel": 200, "scs": 100_000, "dual": 100}
NOT_SEPARABLE = 1e-9  # relative margin below which the data counts as not separable (certified infeasible)
CERTIFY_TOL = 1e-6   # a solution is certified when its relative gap and 1 - its smallest margin are below


@dataclass
class GatedDesign:
    """The data of one program: inputs, labels, gates and the norm's structure."""

    x_train: np.ndarray          # (N, D)
    y_train: np.ndarray          # (N,) in {-1, +1}
    e_train: np.ndarray          # (N, R) gates
    x_val: np.ndarray            # (M, D)
    e_val: np.ndarray            # (M, R)
    norm: str
    groups: list[np.ndarray] = field(default_factory=list)  # row indices of each group (group norms)
    units: int = 1               # H (for the l2 norms)
    count: int = 1               # C (for the l2 norms)

    @property
    def rows(self) -> int:
        return self.e_train.shape[1]


def unit_groups(units: int, count: int) -> list[np.ndarray]:
    """The GLN norm's groups: the C rows h*C .. h*C+C-1 of each unit h."""
    return [np.arange(h * count, (h + 1) * count) for h in range(units)]


def reference_groups(units: int, count: int) -> list[np.ndarray]:
    """The published code's groups {i, i+H, i+2H, ...} (a column-major reshape of row-major rows)."""
    return [np.arange(i, units * count, units) for i in range(units)]


def context_mean(units: int, count: int) -> sp.csr_matrix:
    """P = I_H (x) (1/C) 1 1': replaces each row by the mean of its unit's C rows."""
    return sp.kron(sp.identity(units), np.full((count, count), 1.0 / count), format="csr")


def l2_root(units: int, count: int) -> np.ndarray:
    """A square root of Mt (Mt[(h,c),(h',c')] = 1 + C[h=h'][c=c'] - [h=h']): A = J/sqrt(HC) + sqrt(C)(I - P)."""
    r = units * count
    return np.ones((r, r)) / np.sqrt(r) + np.sqrt(count) * (np.eye(r) - context_mean(units, count).toarray())


def reference_matrix(units: int, count: int) -> np.ndarray:
    """The published code's A_ref: (1/HC) J - T + C I, T summing rows in the groups {i, i+H, ...}."""
    r = units * count
    return np.ones((r, r)) / r - count_groups_matrix(units, count) + count * np.eye(r)


def context_pinv(units: int, count: int) -> np.ndarray:
    """Mt^+ = J/(HC)^2 + (I - P)/C, the pseudo-inverse of svm-l2's Mt (the svm-l2 kernel is E Mt^+ E')."""
    r = units * count
    return np.ones((r, r)) / r ** 2 + (np.eye(r) - context_mean(units, count).toarray()) / count


def reference_null_and_pinv(units: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(B, (A'A)^+) for the published code's A_ref: B spans its null space (H - 1 columns:
    sum_i u_i 1_{g_i} with sum u = 0, g_i the rows {i, i+H, ...}); the pseudo-inverse acts on the rest."""
    a = reference_matrix(units, count)
    ev, vec = np.linalg.eigh(a.T @ a)
    zero = ev < 1e-9 * ev.max()
    return vec[:, zero], (vec[:, ~zero] / ev[~zero]) @ vec[:, ~zero].T


def norm_value(design: GatedDesign, zeta: np.ndarray) -> float:
    """The program's objective at `zeta` ((R, D) array)."""
    n = design.norm
    if n == "sq":
        return float((zeta ** 2).sum())
    if n == "group":
        return float(sum(np.linalg.norm(zeta[g]) for g in design.groups))
    if n == "l1":
        return float(np.abs(zeta).sum())
    h, c = design.units, design.count
    s = zeta.sum(0)
    if n == "l2":
        dev = zeta - context_mean(h, c) @ zeta
        return float(s @ s + c * (dev ** 2).sum())
    if n == "l2-reference":
        return float(((reference_matrix(h, c) @ zeta) ** 2).sum())
    raise ValueError(f"unknown norm {n}")


def decision(zeta: np.ndarray, x: np.ndarray, e: np.ndarray) -> np.ndarray:
    """f(x_n) = sum_r E[n, r] <zeta_r, x_n>."""
    return ((x @ zeta.T) * e).sum(1)


def margin_matrix(design: GatedDesign) -> sp.csr_matrix:
    """Sparse A with (A vec(zeta))_n = y_n f(x_n), vec row-major: one block of D per nonzero gate."""
    x, y, e = design.x_train, design.y_train, design.e_train
    n, d = x.shape
    rn, rr = np.nonzero(e)
    data = (y[rn] * e[rn, rr])[:, None] * x[rn]
    cols = rr[:, None] * d + np.arange(d)
    rows = np.repeat(rn, d)
    return sp.csr_matrix((data.ravel(), (rows, cols.ravel())), shape=(n, design.rows * d))


@dataclass
class Solution:
    """A solver's outcome: the primal zeta and, when the solver gives one, the dual lam."""

    zeta: np.ndarray | None
    status: str        # optimal | inaccurate | infeasible | failed
    value: float
    seconds: float
    solver: str
    message: str = ""
    iterations: int | None = None
    lam: np.ndarray | None = None    # (N,) margin multipliers: a dual certificate


def combination(design: GatedDesign, lam: np.ndarray) -> np.ndarray:
    """V = E' diag(lam o y) X (R x D): the multipliers' weighted sum of gated inputs."""
    return design.e_train.T @ ((lam * design.y_train)[:, None] * design.x_train)


def dual_bound(design: GatedDesign, lam: np.ndarray) -> float:
    """A lower bound on the program's optimum from any lam >= 0 (weak duality).

    With V = E' diag(lam o y) X, every feasible zeta has 1'lam <= <V, zeta> <= ||V||_* ||zeta||, so
    ||zeta|| >= 1'lam / ||V||_*, with ||.||_* the dual norm: the largest group's Frobenius norm for
    group norms, Frobenius for `sq`, sqrt(tr V' Mt^+ V) for `l2`; squared for the quadratic norms.
    The bound does not depend on the scale of lam, so any solver's multipliers can be checked."""
    lam = np.clip(lam, 0, None)
    v = combination(design, lam)
    if design.norm == "group":
        dn = max(np.linalg.norm(v[g]) for g in design.groups)
    elif design.norm == "sq":
        dn = np.linalg.norm(v)
    elif design.norm == "l1":   # the dual of the l1 norm is the max norm
        dn = np.abs(v).max()
    elif design.norm == "l2":
        dn = np.sqrt(max(float(np.sum(v * (context_pinv(design.units, design.count) @ v))), 0.0))
    else:  # l2-reference: lam certifies only when it puts no weight on the null space of A_ref
        null, pinv = reference_null_and_pinv(design.units, design.count)
        if np.linalg.norm(null.T @ v) > 1e-9 * max(np.linalg.norm(v), 1e-300):
            return float("nan")
        dn = np.sqrt(max(float(np.sum(v * (pinv @ v))), 0.0))
    if dn == 0:   # lam = 0: the trivial bound; V(lam) = 0 with lam != 0: no feasible point at all
        return 0.0 if not lam.any() else float("inf")
    bound = lam.sum() / dn
    return float(bound ** 2 if design.norm in QUADRATIC else bound)


def input_radius(design: GatedDesign) -> float:
    """max_n of the dual norm of point n's gated input, so |f(x_n)| <= ||zeta|| * radius."""
    xn, e = np.linalg.norm(design.x_train, axis=1), design.e_train
    if design.norm == "group":
        en = np.max([np.linalg.norm(e[:, g], axis=1) for g in design.groups], axis=0)
    elif design.norm == "l1":
        xn, en = np.abs(design.x_train).max(1), np.abs(e).max(1)
    elif design.norm in ("l2", "l2-reference"):
        pinv = (context_pinv(design.units, design.count) if design.norm == "l2"
                else reference_null_and_pinv(design.units, design.count)[1])
        en = np.sqrt(np.clip(np.einsum("nr,rs,ns->n", e, pinv, e), 0, None))
    else:
        en = np.linalg.norm(e, axis=1)
    return float((xn * en).max())


def relative_margin_bound(design: GatedDesign, lam: np.ndarray) -> float:
    """From a dual ray lam >= 0: an upper bound on min_n y_n f(x_n) / (||zeta|| * input_radius) over
    every predictor zeta (weak duality: 1'lam min_n y_n f(x_n) <= <V, zeta> <= ||V||_* ||zeta||).
    Below NOT_SEPARABLE it certifies that the program is (numerically) infeasible."""
    bound = dual_bound(design, lam)
    if design.norm in QUADRATIC:
        bound = np.sqrt(bound)
    radius = input_radius(design)
    if radius == 0:   # every gated input is zero: no predictor has a positive margin
        return 0.0
    return float(1 / (bound * radius)) if bound > 0 else float("inf")   # bound = inf (V = 0) gives 0


def certificate(design: GatedDesign, sol: Solution, tol: float | None = None) -> dict:
    """Primal objective, dual objective, relative gap and smallest training margin of a solution,
    and whether they meet the tolerance (relative gap <= tol, smallest margin >= 1 - tol)."""
    tol = tol or CERTIFY_TOL
    out = {"primal_objective": float("nan"), "dual_objective": float("nan"), "rel_gap": float("nan"),
           "min_margin": float("nan"), "iterations": sol.iterations, "certified": False, "tolerance": tol}
    if sol.zeta is None:
        if sol.status == "infeasible" and sol.lam is not None:   # certified by a dual ray
            rel = relative_margin_bound(design, sol.lam)
            out.update(dual_objective=dual_bound(design, sol.lam), relative_margin_bound=rel,
                       certified=bool(rel <= NOT_SEPARABLE))
        return out
    margins = decision(sol.zeta, design.x_train, design.e_train) * design.y_train
    primal = norm_value(design, sol.zeta)
    dual = dual_bound(design, sol.lam) if sol.lam is not None else float("nan")
    gap = (primal - dual) / max(abs(primal), 1e-12)   # absolute below 1e-12 (an optimum of 0 is possible)
    out.update(primal_objective=primal, dual_objective=dual, rel_gap=gap, min_margin=float(margins.min()),
               certified=bool(abs(gap) <= tol and margins.min() >= 1 - tol))
    return out


def solver_options(solver: str, max_iters: int | None, eps: float | None) -> dict:
    it = max_iters or DEFAULT_MAX_ITERS[solver]
    if solver == "osqp":
        opts = {"max_iter": it}
        if eps:
            opts.update(eps_abs=eps, eps_rel=eps)
    elif solver == "ecos":
        opts = {"max_iters": it}
        if eps:
            opts.update(abstol=eps, reltol=eps, feastol=eps)
    elif solver == "clarabel":
        opts = {"max_iter": it}
        if eps:
            opts.update(tol_gap_abs=eps, tol_gap_rel=eps, tol_feas=eps)
    else:
        opts = {"max_iters": it}
        if eps:
            opts.update(eps_abs=eps, eps_rel=eps)
    return opts


def solve_primal(design: GatedDesign, solver: str, max_iters: int | None = None,
                 eps: float | None = None) -> Solution:
    """Solve the program in primal form through cvxpy. Never raises on solver trouble: the
    outcome is in `status` (and `message`)."""
    import cvxpy as cp

    r, d = design.rows, design.x_train.shape[1]
    z = cp.Variable(r * d)
    zm = cp.reshape(z, (r, d), order="C")
    h, c = design.units, design.count
    if design.norm == "sq":
        objective = cp.sum_squares(z)
    elif design.norm == "l1":
        objective = cp.norm1(z)
    elif design.norm == "group":
        objective = sum(cp.norm(cp.hstack([zm[i] for i in g])) if len(g) > 1 else cp.norm(zm[int(g[0])])
                        for g in design.groups)
    elif design.norm == "l2":
        # zeta' M zeta = ||s||^2 + C ||(I - P) zeta||^2, with s the sum of all rows
        dev = (sp.identity(r, format="csr") - context_mean(h, c)) @ zm
        objective = cp.sum_squares(cp.sum(zm, axis=0)) + c * cp.sum_squares(dev)
    elif design.norm == "l2-reference":
        # ||A_ref zeta||^2 = ||(C I - T) zeta||^2 + ||s||^2 / (HC): the cross term vanishes
        # because every column of T sums to C.
        t = sp.csr_matrix(count_groups_matrix(h, c))
        objective = cp.sum_squares((c * sp.identity(r, format="csr") - t) @ zm) + cp.sum_squares(cp.sum(zm, axis=0)) / (h * c)
    else:
        raise ValueError(design.norm)
    margins = margin_matrix(design) @ z >= 1
    problem = cp.Problem(cp.Minimize(objective), [margins])
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():  # cvxpy's "may be inaccurate" warning: we record the status instead
            warnings.simplefilter("ignore")
            problem.solve(solver=solver.upper(), **solver_options(solver, max_iters, eps))
    except Exception as exc:  # cvxpy.SolverError and friends: record, never crash the command
        return Solution(None, "failed", float("nan"), time.perf_counter() - start, solver,
                        f"{type(exc).__name__}: {exc}".splitlines()[0])
    seconds = time.perf_counter() - start
    status = {"optimal": "optimal", "optimal_inaccurate": "inaccurate",
              "infeasible": "infeasible", "infeasible_inaccurate": "infeasible"}.get(problem.status, "failed")
    if z.value is None:
        why = ("the training data is not separable under this program's architecture"
               if status == "infeasible" else f"cvxpy status {problem.status}")
        return Solution(None, status, float("nan"), seconds, solver, why)
    zeta = np.asarray(z.value).reshape(r, d)
    lam = None if margins.dual_value is None else np.asarray(margins.dual_value, dtype=float).ravel()
    return Solution(zeta, status, norm_value(design, zeta), seconds, solver,
                    "" if status == "optimal" else f"cvxpy status {problem.status}", lam=lam)


def count_groups_matrix(units: int, count: int) -> np.ndarray:
    """T of the reference objective: T[r, r'] = [r = r' mod H]."""
    idx = np.arange(units * count)
    return (idx[:, None] % units == idx[None, :] % units).astype(float)
