"""The floor of the house, usable by every package: the safe file layer (`safe`, the one place that
checks links) and the names of run and sweep folders and files (`layout`)."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
