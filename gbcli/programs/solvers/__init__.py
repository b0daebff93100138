"""Solvers of the convex max-margin programs, registered by name.

`NAMES` lists the registered solvers and imports nothing: a config's `svm.solver` and `gb fit-svm
--solver` are checked against it without loading torch. The registry itself (`SOLVERS`, name ->
solver instance; `solve`, `default_solver`, `check_solver`) lives in `registered` and is resolved on
first use (PEP 562); tests/test_first_hour.py checks that the two list the same solvers, in order.
"""

from __future__ import annotations

from gbcli.lazy import attach

NAMES = ("dual", "ecos", "osqp", "clarabel", "scs")
_REGISTRY = ("SOLVERS", "check_solver", "default_solver", "solve")
__all__ = ["NAMES", *_REGISTRY]
__getattr__, __dir__ = attach(globals(), {name: f"{__name__}.registered" for name in _REGISTRY})
