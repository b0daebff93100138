"""Primal solvers through cvxpy (ECOS, OSQP, Clarabel, SCS): zeta row-major, the norm's cvxpy objective,
and the margin constraints' dual values as the multipliers lam that `certify` checks.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from gbcli.programs.design import INSEPARABLE, GatedDesign, Solution, margin_matrix
from gbcli.programs.norms import norm_of
from gbcli.programs.solvers import Solver

ALL_NORMS = frozenset({"sq", "l2", "group", "l2-reference", "l1", "linf", "l1.5"})
QUADRATIC_NORMS = frozenset({"sq", "l2", "l2-reference"})
STATUS = {"optimal": "optimal", "optimal_inaccurate": "inaccurate",
          "infeasible": "infeasible", "infeasible_inaccurate": "infeasible"}


class CvxpySolver(Solver):
    """cvxpy with its solver `name` (upper-cased), and that solver's option names for max_iters and eps."""

    def __init__(self, name: str, norms: frozenset[str], default_max_iters: int, iters_option: str,
                 eps_options: tuple[str, ...]):
        self.name, self.norms, self.default_max_iters = name, norms, default_max_iters
        self.iters_option, self.eps_options = iters_option, eps_options

    def solve(self, design: GatedDesign, max_iters: int | None = None, eps: float | None = None) -> Solution:
        import cvxpy as cp   # slow to import; only the primal solvers need it

        r, d = design.rows, design.x_train.shape[1]
        z = cp.Variable(r * d)
        zm = cp.reshape(z, (r, d), order="C")
        norm = norm_of(design)
        margins = margin_matrix(design) @ z >= 1
        problem = cp.Problem(cp.Minimize(norm.cvxpy(cp, design, z, zm)), [margins])
        opts = {self.iters_option: max_iters or self.default_max_iters}
        opts.update(dict.fromkeys(self.eps_options if eps else (), eps))
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():  # cvxpy's "may be inaccurate" warning: we record the status instead
                warnings.simplefilter("ignore")
                problem.solve(solver=self.name.upper(), **opts)
        except Exception as exc:  # cvxpy.SolverError and friends: record, never crash the command
            return Solution(None, "failed", float("nan"), time.perf_counter() - start, self.name,
                            f"{type(exc).__name__}: {exc}".splitlines()[0])
        seconds = time.perf_counter() - start
        status = STATUS.get(problem.status, "failed")
        if z.value is None:
            why = INSEPARABLE if status == "infeasible" else f"cvxpy status {problem.status}"
            return Solution(None, status, float("nan"), seconds, self.name, why)
        zeta = np.asarray(z.value).reshape(r, d)
        lam = None if margins.dual_value is None else np.asarray(margins.dual_value, dtype=float).ravel()
        return Solution(zeta, status, norm.value(design, zeta), seconds, self.name,
                        "" if status == "optimal" else f"cvxpy status {problem.status}", lam=lam)


ECOS = CvxpySolver("ecos", ALL_NORMS, 200, "max_iters", ("abstol", "reltol", "feastol"))
OSQP = CvxpySolver("osqp", QUADRATIC_NORMS, 10_000, "max_iter", ("eps_abs", "eps_rel"))
CLARABEL = CvxpySolver("clarabel", ALL_NORMS, 200, "max_iter", ("tol_gap_abs", "tol_gap_rel", "tol_feas"))
SCS = CvxpySolver("scs", ALL_NORMS, 100_000, "max_iters", ("eps_abs", "eps_rel"))
