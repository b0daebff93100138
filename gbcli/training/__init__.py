"""Gradient-descent training (protocol section 4): the plain loop (`loop.train`) and the losses."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
