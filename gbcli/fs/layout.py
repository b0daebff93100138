"""The layout of run and sweep directories: every name gb gives a record (others ask `RunDir` / `SweepDir`).

A run directory (of `train-gd` / `fit-svm` / `compare`, or one point of a sweep):

    gb-run.json            the kind marker (run), written first
    .gb.lock               the writer's lock
    log.txt                the run's log
    failed.json            a sweep point that failed or was interrupted (its stage, its reason)
    gd/config.yaml         the resolved config of the training
    gd/summary.json        the training's record (its status, manifest, provenance)
    gd/metrics.csv         the logged steps
    gd/model.pt            the trained weights (a state dict, loaded with weights_only)
    gd/predictions.npz     the network's outputs on the training and validation points
    gd/checkpoint.pt       an unfinished training's state (removed once the record is written)
    svm/<objective>/config.yaml, result.json, predictions.npz, compact.npz
    svm/<objective>/rounds.npz   a working-set solve's last round (legacy place, adopted)
    tables/errors.csv      the record of `compare`; tables/*.csv and figures/*.png are its reports

A sweep directory (of `gb sweep`):

    gb-run.json            the kind marker (sweep)
    .sweep.lock, log.txt, config.yaml, sweep.json
    points/<id>/           one run directory per grid point
    solves/<key>.npz       the solve cache (and <key>.lock, <key>.rounds.npz)
    tables/points.csv, tables/*.csv, figures/*.png
    slurm/                 submitit's folder: NOT gb's; gb neither checks nor removes what is in it
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

MARKER = "gb-run.json"
LABELS = "labels.json"   # the user's --name, --tag and --note
LOCK = ".gb.lock"
SWEEP_LOCK = ".sweep.lock"
LOG = "log.txt"
FAILED = "failed.json"
CONFIG = "config.yaml"
SUMMARY = "summary.json"
RESULT = "result.json"
METRICS = "metrics.csv"
MODEL = "model.pt"
PREDICTIONS = "predictions.npz"
COMPACT = "compact.npz"        # a convex program's stored solution (gbcli.store.solutions)
THETA = "theta.npz"            # a non-convex program's parameters
CHECKPOINT = "checkpoint.pt"
ROUNDS = "rounds.npz"
SWEEP = "sweep.json"
ERRORS = "errors.csv"
POINTS_TABLE = "points.csv"
INCONSISTENCY = "inconsistency.csv"
FAILURES = "failures.csv"   # a sweep's points that are not done: not run, failed, interrupted

GD, SVM, TABLES, FIGURES, POINTS, SOLVES, SOLUTIONS = "gd", "svm", "tables", "figures", "points", "solves", "solutions"
SLURM = "slurm"   # submitit's folder in a sweep directory
MLFLOW_DB = "mlflow.db"                # the default MLflow store of `gb runs export mlflow --dir DIR`
MLFLOW_ARTIFACTS = "mlflow-artifacts"  # and its artifact root
FOREIGN = frozenset({SLURM})   # other programs' folders: gb neither refuses what they hold nor writes there
# the records that say a stage finished (what `gb runs` and the MLflow export read first)
STAGE_RECORDS = (SUMMARY, RESULT, SWEEP, ERRORS)


@dataclasses.dataclass(frozen=True, slots=True)
class _Folder:
    """A directory gb owns, by its root (nothing is created or read)."""

    root: Path

    def __post_init__(self):
        object.__setattr__(self, "root", Path(self.root))

    marker = property(lambda self: self.root / MARKER)
    labels = property(lambda self: self.root / LABELS)
    log = property(lambda self: self.root / LOG)
    tables = property(lambda self: self.root / TABLES)
    figures = property(lambda self: self.root / FIGURES)


class RunDir(_Folder):
    """The paths of one run directory."""

    failed = property(lambda self: self.root / FAILED)
    gd = property(lambda self: self.root / GD)
    summary = property(lambda self: self.root / GD / SUMMARY)
    gd_config = property(lambda self: self.root / GD / CONFIG)
    metrics = property(lambda self: self.root / GD / METRICS)
    model = property(lambda self: self.root / GD / MODEL)
    gd_predictions = property(lambda self: self.root / GD / PREDICTIONS)
    checkpoint = property(lambda self: self.root / GD / CHECKPOINT)
    svm = property(lambda self: self.root / SVM)
    errors = property(lambda self: self.root / TABLES / ERRORS)
    inconsistency = property(lambda self: self.root / TABLES / INCONSISTENCY)

    def program(self, objective: str) -> Path:
        return self.root / SVM / objective

    def result(self, objective: str) -> Path:
        return self.root / SVM / objective / RESULT

    def program_config(self, objective: str) -> Path:
        return self.root / SVM / objective / CONFIG

    def results(self) -> list[Path]:
        """The programs' records present (sorted; a link is listed, the readers refuse it)."""
        return sorted((self.root / SVM).glob(f"*/{RESULT}"))


class SweepDir(_Folder):
    """The paths of one sweep directory."""

    config = property(lambda self: self.root / CONFIG)
    record = property(lambda self: self.root / SWEEP)
    points = property(lambda self: self.root / POINTS)
    solves = property(lambda self: self.root / SOLVES)
    points_table = property(lambda self: self.root / TABLES / POINTS_TABLE)

    def point(self, pid: str) -> RunDir:
        return RunDir(self.root / POINTS / pid)

    def gd_files(self, name: str) -> dict[str, Path]:
        """Each point's `gd/<name>` present, by point id (sorted; a link is listed, the readers refuse it)."""
        return {f.parent.parent.name: f for f in sorted((self.root / POINTS).glob(f"*/{GD}/{name}"))}
