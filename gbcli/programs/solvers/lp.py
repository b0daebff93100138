"""HiGHS (through scipy; cvxpy's cone solvers stop short on these LPs) on the l1 and l-infinity programs,
in the normalized form max g s.t. A z >= g 1, ||z|| <= 1, which has an optimum whether or not the data
is separable: g* > 0 gives zeta = z* / g*; otherwise the margin rows' multipliers are the dual ray.
"""

from __future__ import annotations

import time

import numpy as np

from gbcli.programs.design import INSEPARABLE, GatedDesign, Solution, Stop, margin_matrix
from gbcli.programs.norms import norm_of
from gbcli.programs.solvers import Solver

SEPARABLE_ABOVE = 1e-12   # g* / (the largest |A| entry) above which the data counts as separated


class Highs(Solver):
    name, norms, default_max_iters = "highs", frozenset({"l1", "linf"}), 1_000_000

    def solve(self, design: GatedDesign, max_iters: int | None = None, eps: float | None = None) -> Solution:
        import scipy.sparse as sp
        from scipy.optimize import linprog

        a = margin_matrix(design)
        n, m = a.shape
        l1 = design.norm == "l1"
        block = sp.hstack([-a, a]) if l1 else -a            # -A z as a function of (u, v) or z
        k = block.shape[1]
        rows = [sp.hstack([block, sp.csr_matrix(np.ones((n, 1)))])]   # -A z + g <= 0
        b = [np.zeros(n)]
        if l1:
            rows.append(sp.hstack([sp.csr_matrix(np.ones((1, k))), sp.csr_matrix((1, 1))]))   # sum(u + v) <= 1
            b.append(np.ones(1))
        bounds = [(0, None) if l1 else (-1, 1)] * k + [(None, None)]
        c = np.append(np.zeros(k), -1.0)   # maximize g
        opts = {"maxiter": max_iters or self.default_max_iters, "presolve": True}
        if eps:
            opts.update(primal_feasibility_tolerance=eps, dual_feasibility_tolerance=eps)
        start = time.perf_counter()
        try:
            # the interior point with crossover: 52 s where the dual simplex took 77 s (benchmarks/lp_time.py)
            res = linprog(c, A_ub=sp.vstack(rows).tocsr(), b_ub=np.concatenate(b), bounds=bounds, method="highs-ipm",
                          options=opts)
        except (ValueError, MemoryError) as exc:   # scipy's input checks, or a design too large to hold
            return Solution(None, "failed", float("nan"), time.perf_counter() - start, self.name,
                            f"{type(exc).__name__}: {exc}".splitlines()[0])
        seconds = time.perf_counter() - start
        iters = int(getattr(res, "nit", 0) or 0)
        if res.status != 0 or res.x is None:   # 1: the iteration limit
            return Solution(None, "failed", float("nan"), seconds, self.name, f"HiGHS: {res.message}", iters,
                            stop=Stop.ITERATION_LIMIT if res.status == 1 else Stop.NUMERICAL)
        lam = np.clip(-np.asarray(res.ineqlin.marginals[:n], dtype=float), 0, None)
        g = float(res.x[-1])
        scale = float(abs(a).max()) if a.nnz else 0.0
        if not g > SEPARABLE_ABOVE * scale:
            return Solution(None, "infeasible", float("nan"), seconds, self.name, INSEPARABLE, iters, lam=lam,
                            stop=Stop.CONVERGED)
        z = res.x[:k]
        zeta = (((z[: k // 2] - z[k // 2:]) if l1 else z) / g).reshape(design.rows, -1)
        return Solution(zeta, "optimal", norm_of(design).value(design, zeta), seconds, self.name, "", iters, lam=lam,
                        stop=Stop.CONVERGED)
