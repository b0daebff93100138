"""The torch modules of the model kinds, one module per kind (`networks.gln` for `gbcli.models.gln`).

A kind's own module declares it (parameters, spec, programs) and imports without torch, so that a
config is validated before torch loads; its spec builds the network from here, and the kind's
module names these classes as its own attributes (`gbcli.models.gln.DeepGLN`) on first use."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
