"""gb: a laboratory for the implicit bias of gradient descent.

The library API, for notebooks and scripts (the `gb` command line is a thin layer over it):

    import gbcli
    cfg = gbcli.load_config("configs/quickstart.yaml")
    gbcli.train_gd(cfg, "runs/quickstart")
    gbcli.fit_svm(cfg, "runs/quickstart")
    errors, inconsistency = gbcli.compare_run("runs/quickstart")
    errors, inconsistency = gbcli.read_tables("runs/quickstart")
    run = gbcli.load_run("runs/quickstart")   # its config, network, metrics, records and tables

and the certified max-margin solvers on any data, without a config:

    from gbcli import KernelSVM, GroupNormSVM
    svm = KernelSVM().fit(X, y)            # hard-margin SVM without bias, certified
    svm.certificate_["certified"], svm.predict(X_new)

Layout (each package's docstring says more):

- `config`: the config schema (model and dataset sections discriminated by kind) and reading;
- `data`: dataset files, loaders and the config's dataset kinds;
- `models`: one module per model kind (parameters, network, gating, programs, instruments);
- `programs`: designs, norms (one class each), certificates, registered solvers, estimators;
- `training`: the gradient-descent loop and the losses;
- `instruments`: theory instruments tracked during training;
- `fs`: the floor every package may use: the safe file layer and the layout's names;
- `store`: the one owner of run and sweep directories' records (records, identity, cache, locks);
- `runs`: the stages of a run, sweeps and their executors (local pool, Slurm), figures, verify;
- `reports`: tables and rendering;
- `experiments`: the papers' own instruments and reports (built on the models, never the reverse);
- `registry`: every model kind, instrument and report, listed once.
"""

from importlib import metadata as _metadata

from gbcli.lazy import attach as _attach

try:   # one source of truth: the installed package's metadata (pyproject.toml's version)
    __version__ = _metadata.version("gbcli")
except _metadata.PackageNotFoundError:   # run from a source tree that was never installed
    __version__ = "unknown"

# name -> the module that defines it. Resolved on first use (PEP 562), so `import gbcli` and the
# `gb` command's argument errors stay fast: torch and the solvers load only when a name is used.
# Every subpackage and module is reachable the same way (`gbcli.runs.sweep.limit_threads`).
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
