"""Theory instruments (`training.track`): the interface (`base`), the general instruments and the
tracker that runs them during training (`core`). The papers' own instruments are in `gbcli.experiments`."""
