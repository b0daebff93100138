"""The torch modules of the model kinds, one module per kind (`networks.gln` for `gbcli.models.gln`;
`gbcli.models.base.networks_of` names them as the kind module's own attributes)."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
