"""Model kinds, one module each, on `base` (what a kind is) and `gating`; their torch modules are in `networks`."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
