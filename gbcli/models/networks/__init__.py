"""The torch modules of the model kinds, one module per kind (`networks.gln` for `gbcli.models.gln`,
which imports it when it builds a network: `gbcli.models.base.networks`)."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
