"""The papers' own experiments, one module each: its instruments (`INSTRUMENTS`) and the reports it
adds to `gb compare` on a run (`RUN_REPORTS`) and to a sweep's aggregation (`SWEEP_REPORTS`). Each
is an entry point of the group `gbcli.experiments` (pyproject.toml), where `gbcli.registry` finds it.
The models a paper introduces, with their programs and inits, live in `gbcli.models`, which never
imports this package.
"""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
