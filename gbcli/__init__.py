"""gb: a laboratory for the implicit bias of gradient descent. The library API (docs/library-api.md), for
notebooks and scripts; the `gb` command line is a thin layer over it:

    cfg = gbcli.load_config("configs/quickstart.yaml")
    gbcli.train_gd(cfg, "runs/quickstart")
    gbcli.fit_svm(cfg, "runs/quickstart")
    errors, inconsistency = gbcli.compare_run("runs/quickstart")
    run = gbcli.load_run("runs/quickstart")   # its config, network, metrics, records and tables
    svm = gbcli.KernelSVM().fit(X, y)   # a certified hard-margin SVM on any data, without a config

The packages and their layers: docs/code-layout.md.
"""

from importlib import metadata as _metadata

from gbcli.lazy import attach as _attach

try:   # one source of truth: the installed package's metadata (pyproject.toml's version)
    __version__ = _metadata.version("gbcli")
except _metadata.PackageNotFoundError:   # run from a source tree that was never installed
    __version__ = "unknown"

# name -> the module that defines it, imported when the name is first used (PEP 562): `import gbcli` stays fast
_API = {
    "Config": "gbcli.config", "load_config": "gbcli.config", "validate": "gbcli.config",
    "GbError": "gbcli.errors",
    "KernelSVM": "gbcli.programs.estimators", "GroupNormSVM": "gbcli.programs.estimators",
    "NotSeparableError": "gbcli.programs.estimators", "NotSeparableWarning": "gbcli.programs.estimators",
    "MODELS": "gbcli.registry",
    "read_tables": "gbcli.reports.tables",
    "prepare": "gbcli.runs.stages", "build_model": "gbcli.runs.stages", "build_design": "gbcli.runs.stages",
    "train_gd": "gbcli.runs.stages", "fit_svm": "gbcli.runs.stages", "compare_run": "gbcli.runs.compare",
    "run_sweep": "gbcli.runs.sweep", "load_run": "gbcli.runs.load", "Run": "gbcli.runs.load",
}
__all__ = sorted(_API)
__getattr__, __dir__ = _attach(globals(), _API)
