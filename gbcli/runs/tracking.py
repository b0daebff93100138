"""Live tracking in MLflow while a stage runs (config `tracking: {mlflow: URI}`; the optional extra
`pip install 'gbcli[mlflow]'`).

One run directory is one MLflow run, found by the directory's path (the tag `gb.path_id`, the same
one `gb runs export mlflow` matches on, so an export afterwards finds it up to date, and a run
exported earlier is continued rather than doubled):

- `train-gd` starts it (a new one, unless the training resumes from its checkpoint): the config
  as parameters, then each logged row of metrics.csv as it is logged, with the time it was
  measured;
- `fit-svm` (and a sweep point's `compare`) continue it;
- at the end of each stage the results, tables and figures are logged and the run ends FINISHED,
  or FAILED as the records say (KILLED when the stage was interrupted);
- a sweep is the parent run of its points (a point finds its sweep's run by the sweep's path).

Tracking never costs a run: a store that does not answer or refuses something costs one warning
line, and the stage goes on untracked. (gb writes its own records first; MLflow is a view of them.)
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from pathlib import Path

from gbcli import interrupts
from gbcli.errors import GbError
from gbcli.store import layout
from gbcli.store.labels import read_labels
from gbcli.store.safe import flatten, is_file, read_csv_untrusted
from gbcli.text import shorten

log = logging.getLogger("gbcli")
FLUSH_SECONDS = 2.0   # rows are sent in batches at most this often (and at the end)
_DEAD: set[str] = set()   # the tracking URIs that failed in this process


def check(cfg) -> None:
    """Before any work: tracking asked for with MLflow missing is bad input, not a warning."""
    if cfg.tracking.mlflow is None:
        return
    try:
        import mlflow  # noqa: F401
    except ImportError:
        raise GbError("tracking.mlflow: MLflow is not installed (pip install 'gbcli[mlflow]')") from None


class Live:
    """The MLflow run of one run or sweep directory while a stage works on it. Every call to MLflow
    goes through `_guard`: its first failure is one warning and ends the tracking of this stage."""

    def __init__(self, cfg, path: Path, stage: str):
        self.uri, self.experiment = absolute(cfg.tracking.mlflow), cfg.tracking.experiment
        self.cfg, self.path, self.stage = cfg, Path(path), stage
        self.client = self.rid = None
        self.created = False   # a new MLflow run (not one an earlier stage or export started)
        self.pending: list = []
        self.flushed = 0.0

    @classmethod
    def start(cls, cfg, path: str | Path, stage: str, fresh: bool = False, kind: str = "run") -> "Live | None":
        """The directory's MLflow run, RUNNING (None when the config asks for no tracking). `fresh`:
        the stage starts its records anew, so an earlier MLflow run of the directory is replaced."""
        if cfg.tracking.mlflow is None or cfg.tracking.mlflow in _DEAD:
            return None
        live = cls(cfg, Path(path), stage)
        live._guard("start", live._open, fresh, kind)
        return live

    @property
    def working(self) -> bool:
        return self.client is not None

    def _guard(self, what: str, fn, *args):
        if self.client is None and what != "start":
            return None
        try:
            return fn(*args)
        except Exception as exc:   # noqa: BLE001 (MLflow's own errors, a server that does not answer, a full disk)
            first = (str(exc).strip().splitlines() or [""])[0]
            log.warning(f"tracking: {shorten(self.uri, 120)}: {what} failed ({type(exc).__name__}: "
                        f"{shorten(first, 160)}); {self.stage} goes on without tracking")
            self.client = None
            _DEAD.add(self.uri)   # this process's later stages stay silent: one line, not one per stage
            return None

    def _open(self, fresh: bool, kind: str) -> None:
        from gbcli.runs import mlflow_export as mx

        client = mx._client(self.uri)
        exp = client.get_experiment_by_name(self.experiment)
        if exp is None:
            where = None
            if self.uri.startswith("sqlite:///"):   # artifacts beside the database, as the export puts them
                where = (Path(self.uri[len("sqlite:///"):]).parent / layout.MLFLOW_ARTIFACTS / self.experiment).as_uri()
            exp_id = client.create_experiment(self.experiment, artifact_location=where)
        else:
            exp_id = exp.experiment_id
        earlier = mx.runs_of(client, exp_id, self.path)
        keep = None if fresh or not earlier else earlier[0]
        for r in earlier:
            if r is not keep:   # records started anew (or a second run of it): replaced, never doubled
                client.delete_run(r.info.run_id)
        labels = read_labels(self.path)
        if keep is None:
            path = self.path.resolve()
            tags = {"gb.path": str(path), "gb.path_id": mx.path_id(path), "gb.kind": kind, "gb.live": "yes",
                    **{f"gb.tag.{k}": v for k, v in labels.get("tags", {}).items()}}
            if labels.get("note"):
                tags["mlflow.note.content"] = labels["note"]
            parent = self._parent(client, exp_id)
            if parent is not None:
                tags["mlflow.parentRunId"] = parent
            run = client.create_run(exp_id, run_name=labels.get("name") or self._name(), tags=tags)
            self.rid, have, self.created = run.info.run_id, {}, True
        else:
            self.rid, have = keep.info.run_id, keep.data.params
            client.update_run(self.rid, status="RUNNING")
        mx.log_params(client, self.rid, flatten(self.cfg.to_dict()), have)   # a value an earlier stage logged stays (MLflow keeps the first)
        self.client = client

    def _parent(self, client, exp_id: str) -> str | None:
        """A sweep point's parent: its sweep's MLflow run (`<sweep>/points/<id>`)."""
        from gbcli.runs import mlflow_export as mx

        if self.path.parent.name != layout.POINTS:
            return None
        found = mx.runs_of(client, exp_id, self.path.parent.parent)
        return found[0].info.run_id if found else None

    def _name(self) -> str:
        """A point: its readable name from the sweep's point table when there is one; else the folder."""
        if self.path.parent.name == layout.POINTS:
            table = self.path.parent.parent / layout.TABLES / layout.POINTS_TABLE
            names = read_point_names(table)
            return f"{self.path.parent.parent.name}/{names.get(self.path.name, self.path.name)}"
        return self.path.name

    def row(self, row: dict) -> None:
        """One logged row of metrics.csv, as it is logged (sent at most every FLUSH_SECONDS)."""
        if self.client is None:
            return
        from mlflow.entities import Metric

        now, step = int(time.time() * 1000), int(row.get("step", 0))
        self.pending += [Metric(k, float(v), now, step) for k, v in row.items()
                         if k not in ("step", "epoch") and isinstance(v, (int, float)) and math.isfinite(v)]
        if time.monotonic() - self.flushed >= FLUSH_SECONDS:
            self._guard("logging the metrics", self._flush)

    def _flush(self) -> None:
        pending, self.pending = self.pending, []
        for i in range(0, len(pending), 1000):
            self.client.log_batch(self.rid, metrics=pending[i:i + 1000])
        self.flushed = time.monotonic()

    def finish(self) -> None:
        """The stage ended: the rows left, then the results, tables and figures its records hold (and
        the training curves from metrics.csv, when this stage is not the training and began the run)."""
        from gbcli.runs import mlflow_export as mx
        from gbcli.runs.index import read_any

        curves = self.created and self.stage != "train-gd"
        self._guard("logging the metrics", self._flush)
        self._guard("logging the results", lambda: mx.seal(self.client, self.rid, read_any(self.path), curves))

    def ended(self, status: str) -> None:
        """The stage stopped (KILLED: interrupted, FAILED: an error): what was logged stays; a rerun
        continues the run."""
        self._guard("logging the metrics", self._flush)
        self._guard("ending the run", lambda: self.client.set_terminated(self.rid, status=status))


@contextlib.contextmanager
def tracked(live: Live | None):
    """A stage's work, tracked by `live` (None: untracked): finished at its end, KILLED or FAILED
    when it stops with an exception (which goes on)."""
    if live is None:
        yield
        return
    try:
        yield
    except BaseException as exc:
        live.ended("KILLED" if isinstance(exc, (KeyboardInterrupt, SystemExit, interrupts.Interrupted)) else "FAILED")
        raise
    live.finish()


def absolute(uri: str) -> str:
    """A SQLite URI with a relative path (`sqlite:///runs/mlflow.db`) made absolute here: a sweep's
    workers may start elsewhere."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return f"sqlite:///{Path(uri[len('sqlite:///'):]).resolve()}"
    return uri


def read_point_names(table: Path) -> dict[str, str]:
    """point id -> readable name, from a sweep's points.csv (empty when it is missing or not gb's)."""
    if not is_file(table):
        return {}
    try:
        frame = read_csv_untrusted(table, dtype=str)   # ids of digits only stay text
        return {str(p): str(n) for p, n in zip(frame["point"], frame["name"])}
    except Exception:   # noqa: BLE001 (a damaged table: the point keeps its folder's name)
        return {}
