"""The papers' own experiments, one module each (`paper001`, `paper002`, `paper003`).

Each module holds what only its paper needs: programs that a model module declares as its own
(`PROGRAMS`), instruments (`INSTRUMENTS`), and the reports it adds to `gb compare` on a run
(`RUN_REPORTS`) and to a sweep's aggregation (`SWEEP_REPORTS`). `gbcli.registry` collects them;
the general modules do not mention papers.
"""
