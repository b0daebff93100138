"""The registry of solvers: `SOLVERS` (name -> instance), `solve`, `check_solver`."""

from __future__ import annotations

from gbcli.errors import GbError
from gbcli.programs.design import GatedDesign, Solution
from gbcli.programs.norms import NORMS
from gbcli.programs.solvers import Solver
from gbcli.programs.solvers.dual import DualSolver
from gbcli.programs.solvers.lp import Highs
from gbcli.programs.solvers.primal import CLARABEL, ECOS, OSQP, SCS

SOLVERS: dict[str, Solver] = {s.name: s for s in (DualSolver(), ECOS, OSQP, CLARABEL, SCS, Highs())}


def default_solver(norm: str) -> str:
    return NORMS[norm].default_solver


def check_solver(solver: str, objective: str, norm: str, key: str = "--solver") -> None:
    """GbError unless `solver` can solve a program with this norm (one of the norms it declares)."""
    if norm not in SOLVERS[solver].norms:
        able = ", ".join(n for n, other in SOLVERS.items() if norm in other.norms)
        raise GbError(f"{key} {solver}: {objective} minimizes {NORMS[norm].description}, which "
                      f"{solver.upper() if solver != 'dual' else 'the dual solver'} cannot solve (use {able})")


def solve(design: GatedDesign, solver: str | None = None, max_iters: int | None = None,
          eps: float | None = None) -> Solution:
    return SOLVERS[solver or default_solver(design.norm)].solve(design, max_iters, eps)


solve_primal = solve   # gbcli.programs.solve_primal(design, "clarabel"): the primal solvers' name for it
