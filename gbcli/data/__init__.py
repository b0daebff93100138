"""Data: the config's dataset kinds, each with its pool and split, and the dataset files (`sources`)."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
