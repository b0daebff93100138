"""Data: the dataset files and loaders (`sources`) and the config's dataset kinds (`datasets`)."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
