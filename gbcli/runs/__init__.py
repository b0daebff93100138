"""Running experiments: the stages of one run (`stages`), grids of runs (`sweep`) and where the
points run (`executors`: a local process pool or a Slurm job array)."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
