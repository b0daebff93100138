"""Theory instruments (`training.track`): the interface (`base`), the general ones and their Tracker (`core`)."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
