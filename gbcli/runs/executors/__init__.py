"""Where a sweep's points run (see `base`): the local pool or the Slurm array."""

from __future__ import annotations

from pathlib import Path

from gbcli.runs.executors.base import Executor


def make_executor(sweep, executor: str, jobs: int, threads: int | None, out: Path, echo) -> Executor:
    """The executor asked for (Slurm's options: the sweep section, `sweep.*` and `sweep.slurm`)."""
    if executor == "slurm":
        from gbcli.runs.executors.slurm import SlurmArray

        return SlurmArray(jobs, sweep.model_dump(), out, echo)
    from gbcli.runs.executors.local import LocalPool

    return LocalPool(jobs, threads)

from gbcli.lazy import attach  # noqa: E402

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
