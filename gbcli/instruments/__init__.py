"""Theory instruments (`training.track`): the interface (`base`), the general instruments and the
tracker that runs them during training (`core`). The papers' own instruments are in `gbcli.experiments`."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
