"""Solvers of the convex max-margin programs: a solver is a registered class that declares which
norms it can solve (as cvxpy's solver classes declare their capabilities), so a request such as
`--solver osqp --objective svm-gln` is checked by asking the solver, before any work.

`NAMES` lists the registered solvers and imports nothing: a config's `svm.solver` and `gb fit-svm
--solver` are checked against it without loading torch. The registry itself (`SOLVERS`, name ->
solver instance; `solve`, `default_solver`, `check_solver`) lives in `registered` and is resolved on
first use (PEP 562); tests/test_first_hour.py checks that the two list the same solvers, in order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from gbcli.lazy import attach

if TYPE_CHECKING:
    from gbcli.programs.design import GatedDesign, Solution

NAMES = ("dual", "ecos", "osqp", "clarabel", "scs", "highs")
_REGISTRY = ("SOLVERS", "check_solver", "default_solver", "solve")
__all__ = ["NAMES", "Solver", *_REGISTRY]
__getattr__, __dir__ = attach(globals(), {name: f"{__name__}.registered" for name in _REGISTRY})


class Solver:
    name: ClassVar[str]
    norms: ClassVar[frozenset[str]]      # names of the norms (gbcli.programs.norms) it solves
    default_max_iters: ClassVar[int]
    # the options of `solve` beyond (design, max_iters, eps) that this solver honours (svm.time_limit,
    # svm.device, a round checkpoint); a request for one it does not honour is refused before any work
    honours: ClassVar[frozenset[str]] = frozenset()
    description: ClassVar[str] = ""

    def can_solve(self, norm: str) -> bool:
        return norm in self.norms

    def solve(self, design: GatedDesign, max_iters: int | None = None, eps: float | None = None) -> Solution:
        """Solve; never raises on solver trouble: the outcome is in `status` (and `message`)."""
        raise NotImplementedError
