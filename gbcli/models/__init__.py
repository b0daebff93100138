"""Model kinds, one module each, on the interface of `base` (what a kind is) and the hyperplane
gating of `gating`; their torch modules are in `networks`. The registry of kinds is `gbcli.registry`."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
