"""The solver interface: a solver is a registered class that declares which norms it can solve
(as cvxpy's solver classes declare their capabilities), so a request such as
`--solver osqp --objective svm-gln` is checked by asking the solver, before any work."""

from __future__ import annotations

from typing import ClassVar

from gbcli.programs.design import GatedDesign, Solution


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
