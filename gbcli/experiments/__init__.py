"""The papers' own experiments, one module each (`paper001`, `paper002`, `paper003`, `paper004`).

Each module holds what only its paper's experiments need: instruments (`INSTRUMENTS`), and the
reports it adds to `gb compare` on a run (`RUN_REPORTS`) and to a sweep's aggregation
(`SWEEP_REPORTS`). Each registers itself as an entry point of the group `gbcli.experiments`
(pyproject.toml), where `gbcli.registry` finds them without importing this package; the general
modules do not mention papers.
Experiments build on models, never the reverse: the models a paper introduces, with their programs
and inits, live in `gbcli.models` (e.g. `gbcli.models.construction`, `gbcli.models.one_class`),
and no module of `gbcli.models` imports this package.
"""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
