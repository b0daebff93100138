"""The model kinds' torch modules, imported only when a kind builds a network (`gbcli.models.base.networks`)."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
