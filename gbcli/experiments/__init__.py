"""The papers' own experiments, one module each: its `INSTRUMENTS`, its reports for `gb compare` on a run
(`RUN_REPORTS`) and for a sweep's aggregation (`SWEEP_REPORTS`). Each is an entry point of the group
`gbcli.experiments` (pyproject.toml); `gbcli.models` never imports this package.
"""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
