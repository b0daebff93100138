"""Where a sweep's points run (see `base`): `make_executor` picks the local pool or the Slurm array
from the sweep section of the config."""

from __future__ import annotations

from pathlib import Path

from gbcli.runs.executors.base import Executor


def make_executor(sweep, executor: str, jobs: int, threads: int | None, out: Path, echo) -> Executor:
    """The executor the sweep section asks for (`sweep.executor`, its jobs and threads; Slurm's
    options are `sweep.*` and `sweep.slurm`)."""
    if executor == "slurm":
        from gbcli.runs.executors.slurm import SlurmArray

        return SlurmArray(jobs, sweep.model_dump(), out, echo)
    from gbcli.runs.executors.local import LocalPool

    return LocalPool(jobs, threads)

from gbcli.lazy import attach  # noqa: E402

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
