"""The one home of how gb writes into MLflow: live while a stage works (config `tracking: {mlflow: URI}`)
and replayed from the records afterwards (`gb runs export mlflow`), one naming either way
(docs/mlflow-and-runs.md). One directory is one MLflow run, found by its path (tag `gb.path_id`), never
doubled; a sweep is the parent of its points. A store that fails costs one warning line, never the run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import math
import os
import time
from pathlib import Path

from gbcli import interrupts
from gbcli.errors import GbError
from gbcli.fs import layout
from gbcli.fs.layout import RunDir, SweepDir
from gbcli.fs.safe import files_below, flatten, is_file, present, read_csv_untrusted, read_untrusted
from gbcli.runs.index import grid_axes, read_any, show
from gbcli.store.labels import read_labels
from gbcli.store.records import RunState
from gbcli.store.views import SweepView, point_names
from gbcli.text import shorten

log = logging.getLogger("gbcli")
FLUSH_SECONDS = 2.0   # rows are sent in batches at most this often (and at the end)
MAX_PARAM = 500   # characters of a parameter value (MLflow's own limit is larger; lists of classes are long)
_DEAD: set[str] = set()   # the tracking URIs that failed in this process


def check(cfg) -> None:
    """Before any work: tracking asked for with MLflow missing is bad input, not a warning."""
    if cfg.tracking.mlflow is not None:
        _import_mlflow("tracking.mlflow")


def _import_mlflow(what: str):
    try:
        import mlflow
    except ImportError:
        raise GbError(f"{what}: MLflow is not installed (pip install 'gbcli[mlflow]')") from None
    return mlflow


def open_store(uri: str, experiment: str, say, what: str = "gb runs export mlflow") -> tuple:
    """(an MlflowClient, the id of `experiment`, created when missing; a SQLite store's artifacts in
    `mlflow-artifacts/<name>/` beside it). A new database's setup (about 10 s) is named (`say`) first.
    Quiet: MLflow's own lines (tracebacks, "View run ...") are not gb's; a dead server: one try of 10 s."""
    db = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else None
    if db and not present(db):
        say(f"creating the MLflow database {shorten(db, 200)} (about 10 s)")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"   # read by MLflow when a run ends
    mlflow = _import_mlflow(what)
    logging.getLogger("mlflow").setLevel(logging.CRITICAL)
    logging.getLogger("alembic").setLevel(logging.CRITICAL)   # the database's migrations, when it is created
    mlflow_client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    exp = mlflow_client.get_experiment_by_name(experiment)
    if exp is not None:
        return mlflow_client, exp.experiment_id
    where = (Path(db).parent / layout.MLFLOW_ARTIFACTS / experiment).resolve().as_uri() if db else None
    return mlflow_client, mlflow_client.create_experiment(experiment, artifact_location=where)


def absolute(uri: str) -> str:
    """A SQLite URI's relative path made absolute here: a sweep's workers may start elsewhere."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return f"sqlite:///{Path(uri[len('sqlite:///'):]).resolve()}"
    return uri


def _warn(uri: str, what: str, exc: Exception, then: str = "") -> None:
    """A store that failed: one warning line, and this process tracks no more to it."""
    first = (str(exc).strip().splitlines() or [""])[0]
    log.warning(f"tracking: {shorten(uri, 120)}: {what} failed ({type(exc).__name__}: {shorten(first, 160)}){then}")
    _DEAD.add(uri)


def _log(mlflow_client, rid: str, metrics: list = (), params: list = (), tags: list = ()) -> None:
    """Into MLflow run `rid`, in batches MLflow takes (at most 1000 metrics, 100 parameters or tags)."""
    for key, items, size in (("metrics", metrics, 1000), ("params", params, 100), ("tags", tags, 100)):
        for i in range(0, len(items), size):
            mlflow_client.log_batch(rid, **{key: items[i:i + size]})


def path_id(path: Path) -> str:
    """The tag that finds a directory's MLflow run (a value a filter can quote)."""
    return hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:16]


def runs_of(mlflow_client, experiment: str, path: Path) -> list:
    """Every MLflow run of the directory `path` in `experiment`, newest first, however many (pages)."""
    path = Path(path).resolve()
    out, token = [], None
    while True:
        page = mlflow_client.search_runs([experiment], filter_string=f"tags.`gb.path_id` = '{path_id(path)}'",
                                         max_results=1000, page_token=token, order_by=["attributes.start_time DESC"])
        out += [r for r in page if r.data.tags.get("gb.path") == str(path)]
        token = page.token
        if not token:
            return out


def fingerprint(path: Path, under: str = "") -> str:
    """A hash of a run's records (of those in `under` only, if given): unchanged records, no new MLflow run."""
    h = hashlib.sha256()
    for rel in sorted(str(p.relative_to(path)) for p in files_below(path / under)
                      if p.name in layout.STAGE_RECORDS):
        try:
            h.update(rel.encode() + read_untrusted(path / rel, 64 * 1024 ** 2))
        except (OSError, ValueError):
            h.update(rel.encode() + b"?")
    return h.hexdigest()[:16]


# ------------------------------------------------------------------ names and parameters: one scheme


def logged(key: str) -> bool:
    """Whether a config key is logged as a parameter: not the name, nor tracking.* (a URI may hold a secret)."""
    return key != "name" and not key.startswith("tracking.")


def sweep_params(path: Path) -> dict:
    """A sweep's parameters: each axis as given (`grid.<key>`, `zip.<key>`: its list of values) and the
    keys every point shares; never a base value that an axis overrides."""
    raw = SweepView(path).config() or {}
    axes = {f"{kind}.{k}": v for kind in ("grid", "zip") if isinstance(raw.get(kind), dict)
            for k, v in raw[kind].items()}
    swept = {k.partition(".")[2] for k in axes} | set(grid_axes(path))

    def overridden(key: str) -> bool:   # the key, or a section above or below it, is swept
        return any(key == s or key.startswith(s + ".") or s.startswith(key + ".") for s in swept)

    base = flatten({k: v for k, v in raw.items() if k not in ("grid", "zip")})
    return {**{k: v for k, v in base.items() if not overridden(k)},
            **{k: json.dumps(v, default=str) for k, v in axes.items()}}


def _own_tags(path: Path, kind: str, labels: dict) -> dict[str, str]:
    path = Path(path).resolve()
    # the note: MLflow shows it as the run's description
    return {"gb.path": str(path), "gb.path_id": path_id(path), "gb.kind": kind,
            **{f"gb.tag.{k}": v for k, v in labels.get("tags", {}).items()},
            **{tag: labels[k] for k, tag in (("note", "mlflow.note.content"), ("name", "gb.name")) if labels.get(k)}}


# ------------------------------------------------------------------ what a directory's records give its run


def seal(mlflow_client, rid: str, info, curves: bool, prov: dict) -> None:
    """Log a directory's results, artifacts and tags into its MLflow run (with `curves`, metrics.csv's rows too,
    spread over the training's wall time by step) and end it, FINISHED or FAILED as its records (`info`, `prov`)
    say; `gb.fingerprint` and `gb.exported`, logged last, tell a later export the run is up to date."""
    from mlflow.entities import Metric, RunTag

    end = _times(prov)[1]
    now = end or int(time.time() * 1000)
    points = _curves(info.path) if curves else []
    last = max((step for _, _, step in points), default=0) or 1
    t0, t1 = (t or now for t in _times({"gd": prov.get("gd")}))
    _log(mlflow_client, rid, metrics=[Metric(k, v, now, 0) for k, v in info.numbers.items()]
         + [Metric(k, v, t0 + (t1 - t0) * step // last, step) for k, v, step in points])
    for f, folder in _artifacts(info.path, info.kind):
        mlflow_client.log_artifact(rid, str(f), artifact_path=folder or None)
    tags = {**_own_tags(info.path, info.kind, info.labels), "gb.status": info.status,
            "gb.fingerprint": fingerprint(info.path), "gb.fingerprint.gd": fingerprint(info.path, layout.GD),
            **{f"gb.stage.{k}": v for k, v in info.stages.items()}}
    main = prov.get("gd") or prov.get("sweep") or prov.get("created") or {}
    for k, v in (main if isinstance(main, dict) else {}).items():
        if isinstance(v, (str, int, float, bool)) or v is None:
            tags[f"gb.provenance.{k}"] = str(v)[:5000]
    _log(mlflow_client, rid, tags=[RunTag(k, v) for k, v in {**tags, "gb.exported": "yes"}.items()])
    status = "FINISHED" if info.status in (RunState.COMPLETE, RunState.SOLVED, RunState.TRAINED) else "FAILED"
    mlflow_client.set_terminated(rid, status=status, end_time=end)


def _times(prov: dict) -> tuple[int | None, int | None]:
    """(start, end) in ms since the epoch: the records' earliest `started` and latest `ended` (or None)."""
    def stamps(key: str):
        for rec in prov.values():
            value = rec.get(key) if isinstance(rec, dict) else None
            if isinstance(value, str) and len(value) < 40:
                with contextlib.suppress(ValueError):
                    yield int(dt.datetime.fromisoformat(value).timestamp() * 1000)

    start, end = min(stamps("started"), default=None), max(stamps("ended"), default=None)
    return start, (start if start is not None and end is not None and end < start else end)


def _artifacts(path: Path, kind: str) -> list[tuple[Path, str]]:
    """(file, artifact folder) of a directory's records, configs, log, tables and figures; never a link."""
    run, sweep = RunDir(path), SweepDir(path)
    named = {sweep.marker, sweep.config, sweep.record} if kind == "sweep" else \
        {run.marker, run.log, run.gd_config, run.summary, run.metrics}
    return [(f, "" if f.parent == run.root else str(f.parent.relative_to(path))) for f in sorted(files_below(path))
            if f in named or (f.parent, f.suffix) in ((run.tables, ".csv"), (run.figures, ".png"))
            or (kind != "sweep" and f.parent.parent == run.svm and f.name in (layout.RESULT, layout.CONFIG))]


def _curves(path: Path) -> list[tuple[str, float, int]]:
    """(column, value, step) of each finite value of gd/metrics.csv ([] when unreadable); a row without a
    whole step in MLflow's range is left out; without a step column, the rows in order. Lenient, unlike the
    store's `read_metrics`: an export salvages what a damaged table still holds."""
    import pandas as pd

    try:
        frame = read_csv_untrusted(RunDir(path).metrics) if is_file(RunDir(path).metrics) else pd.DataFrame()
    except Exception:   # noqa: BLE001 (a corrupt table: the export goes on without its curves)
        return []
    steps = (pd.to_numeric(frame["step"], errors="coerce") if "step" in frame.columns
             else pd.Series(range(len(frame)), dtype=float))
    out = []
    for col in [c for c in frame.columns if c not in ("step", "epoch")]:
        try:
            values = frame[col].astype(float)
        except (TypeError, ValueError):
            continue
        out += [(col, float(v), int(step)) for step, v in zip(steps, values)
                if math.isfinite(v) and math.isfinite(step) and step == int(step) and 0 <= step < 2 ** 53]
    return out


# ------------------------------------------------------------------ a directory's MLflow run, live or replayed


class Live:
    """The MLflow run of one directory while a stage works on it (`start`) or its records are replayed
    (`replay`). A live stage's calls go through `_guard`: the first failure warns and ends its tracking."""

    def __init__(self, uri: str, experiment: str, path: Path, stage: str, params: dict):
        self.uri, self.experiment = absolute(uri), experiment
        self.path, self.stage, self.params = Path(path), stage, params
        self.client = self.rid = None
        self.created = False   # a new MLflow run (not one an earlier stage or export started)
        self.pending: list = []
        self.flushed = 0.0

    @classmethod
    def start(cls, cfg, path: str | Path, stage: str, fresh: bool = False, kind: str = "run") -> "Live | None":
        """The directory's MLflow run, RUNNING (None untracked); `fresh`: an earlier run is replaced."""
        if cfg.tracking.mlflow is None or absolute(cfg.tracking.mlflow) in _DEAD:
            return None
        live = cls(cfg.tracking.mlflow, cfg.tracking.experiment, Path(path), stage, flatten(cfg.to_dict()))

        def open_() -> None:
            mc, exp = open_store(live.uri, live.experiment, log.info, "tracking.mlflow")
            earlier = runs_of(mc, exp, live.path)
            live._open(mc, exp, earlier, None if fresh or not earlier else earlier[0], kind)

        live._guard("start", open_)
        return live

    @classmethod
    def replay(cls, mlflow_client, uri: str, experiment: str, exp_id: str, info, parent: str | None = None
               ) -> tuple[str, bool]:
        """Log a directory's records (`info`) into its MLflow run as live stages would have: nothing when
        these very records are there; the live run continued when its training is unchanged; else a new
        run (others replaced). Returns (run id, whether anything was logged); MLflow's errors are raised."""
        now, training = fingerprint(info.path), fingerprint(info.path, layout.GD)
        earlier = runs_of(mlflow_client, exp_id, info.path)
        done = next((r for r in earlier if r.data.tags.get("gb.fingerprint") == now
                     and r.data.tags.get("gb.exported") == "yes"), None)
        if done is not None:
            _drop(mlflow_client, earlier, done)
            return done.info.run_id, False
        live = next((r for r in earlier if r.data.tags.get("gb.live") == "yes"
                     and r.data.tags.get("gb.fingerprint.gd") == training), None)
        one = cls(uri, experiment, info.path, "replay", info.config)
        prov = show(info.path)["provenance"]   # read once: the run's start here, its tags in seal
        one._open(mlflow_client, exp_id, earlier, live, info.kind, parent=parent, start=_times(prov)[0], live=False)
        try:
            seal(mlflow_client, one.rid, info, one.created, prov)
        except BaseException:
            with contextlib.suppress(Exception):
                mlflow_client.set_terminated(one.rid, status="FAILED")   # not "exported": the next replay redoes it
            raise
        return one.rid, True

    @property
    def working(self) -> bool:
        return self.client is not None

    def _guard(self, what: str, fn) -> None:
        if self.client is None and what != "start":
            return
        try:
            fn()
        except Exception as exc:   # noqa: BLE001 (MLflow's own errors, a server that does not answer, a full disk)
            self.client = None   # this process's later stages stay silent: one line, not one per stage
            _warn(self.uri, what, exc, f"; {self.stage} goes on without tracking")

    def _open(self, mlflow_client, exp_id: str, earlier: list, keep, kind: str, parent: str | None = None,
              start: int | None = None, live: bool = True) -> None:
        """Continue `keep` (one of `earlier`; the others deleted) or create the run (a point's: its sweep's child)."""
        _drop(mlflow_client, earlier, keep)
        params = sweep_params(self.path) if kind == "sweep" else self.params
        if keep is None:
            labels = read_labels(self.path)
            tags = {**_own_tags(self.path, kind, labels), **({"gb.live": "yes"} if live else {})}
            sweep = self.path.parent.parent if self.path.parent.name == layout.POINTS else None
            if parent is None and sweep is not None:
                found = runs_of(mlflow_client, exp_id, sweep)
                parent = found[0].info.run_id if found else None
            if parent is not None:
                tags["mlflow.parentRunId"] = parent
            # its name: the `--name`; a point's, its sweep's folder and what tells it from the other points
            # (`hs/hidden_units=10,seed=1`; its id without points.csv); else the folder's
            name = labels.get("name") or \
                (f"{sweep.name}/{point_names(sweep).get(self.path.name, self.path.name)}" if sweep else self.path.name)
            run = mlflow_client.create_run(exp_id, run_name=name, tags=tags, start_time=start)
            self.rid, have, self.created = run.info.run_id, {}, True
        else:
            self.rid, have = keep.info.run_id, keep.data.params
            mlflow_client.update_run(self.rid, status="RUNNING")
        from mlflow.entities import Param

        # a value an earlier stage logged stays (MLflow refuses a changed one)
        _log(mlflow_client, self.rid, params=[Param(k, str(v)[:MAX_PARAM]) for k, v in params.items()
                                              if logged(k) and k not in have])
        self.client, self.exp_id = mlflow_client, exp_id

    def replay_points(self, dirs: list[Path], say) -> None:
        """The points finished before tracking began, each replayed as a child of this run; `say` first."""
        if self.client is None or not dirs:
            return
        say(f"tracking: {len(dirs)} points finished earlier: logging their records to MLflow {shorten(self.uri, 160)} "
            f"(those already there are left as they are)")

        def replay_all() -> None:
            for d in dirs:
                Live.replay(self.client, self.uri, self.experiment, self.exp_id, read_any(Path(d)), parent=self.rid)

        self._guard("logging the points finished earlier", replay_all)

    def row(self, row: dict) -> None:
        """One row of metrics.csv, as it is logged (sent at most every FLUSH_SECONDS)."""
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
        _log(self.client, self.rid, metrics=pending)
        self.flushed = time.monotonic()


def _drop(mlflow_client, runs: list, keep) -> None:
    """Delete the MLflow runs of a directory but `keep`: it has one, never two."""
    for r in runs:
        if r is not keep:
            mlflow_client.delete_run(r.info.run_id)


@contextlib.contextmanager
def tracked(live: Live | None):
    """A stage's work, tracked by `live` (None: untracked): at its end, the rows left, then what its records hold
    (metrics.csv's curves too when this stage began the run and is not the training, which logged its rows)."""
    if live is None:
        yield
        return
    try:
        yield
    except BaseException as exc:   # the stage stopped: KILLED (interrupted), FAILED (an error); a rerun continues it
        live._guard("logging the metrics", live._flush)
        status = "KILLED" if isinstance(exc, (KeyboardInterrupt, SystemExit, interrupts.Interrupted)) else "FAILED"
        live._guard("ending the run", lambda: live.client.set_terminated(live.rid, status=status))
        raise
    live._guard("logging the metrics", live._flush)
    curves = live.created and live.stage != "train-gd"
    live._guard("logging the results", lambda: seal(live.client, live.rid, read_any(live.path), curves,
                                                     show(live.path)["provenance"]))


def replay_done(cfg, run_dir: str | Path, lead: str) -> str | None:
    """A tracked stage with nothing left to do: its records replayed (as the export does). One line, `lead` and
    what it does, is logged first and returned (None untracked); a failing store costs one warning line."""
    if cfg.tracking.mlflow is None:
        return None
    uri, experiment = absolute(cfg.tracking.mlflow), cfg.tracking.experiment
    line = (f"{lead}; logging the run's records to MLflow {shorten(uri, 160)} (experiment {experiment}), as `gb runs "
            f"export mlflow` does")
    log.info(line)
    if uri in _DEAD:
        return line
    try:
        mc, exp = open_store(uri, experiment, log.info, "tracking.mlflow")
        Live.replay(mc, uri, experiment, exp, read_any(Path(run_dir)))
    except GbError:
        raise
    except Exception as exc:   # noqa: BLE001 (as a live stage: one warning line, never the run)
        _warn(uri, "logging the records", exc)
    return line
