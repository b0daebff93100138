"""Solvers of the convex max-margin programs: registered classes that declare the norms they solve, so
`--solver osqp --objective svm-gln` is refused before any work. `NAMES` imports nothing (configs are
checked without torch); the registry (`SOLVERS`, `solve`, ...) lives in `registered`, loaded on first use.
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
    name: str
    norms: frozenset[str]      # names of the norms (gbcli.programs.norms) it solves
    default_max_iters: int
    # the options of `solve` beyond (design, max_iters, eps) it honours; others are refused before any work
    honours: ClassVar[frozenset[str]] = frozenset()

    def solve(self, design: GatedDesign, max_iters: int | None = None, eps: float | None = None) -> Solution:
        """Solve; never raises on solver trouble: the outcome is in `status` (and `message`)."""
        raise NotImplementedError
