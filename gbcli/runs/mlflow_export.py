"""Export runs and sweeps to an MLflow tracking store (`gb runs export mlflow`; the optional extra
`pip install 'gbcli[mlflow]'`).

Each run directory becomes an MLflow run; a sweep becomes a parent run with one child run per
point. An MLflow run carries:

- parameters: the resolved config, flattened (`model.hidden_units`, ...);
- metrics: the training curves of `gd/metrics.csv` (one value per logged step) and the results
  (`<predictor>.val_error`, `<objective>.objective`, ...);
- tags: the provenance of the training (`gb.provenance.*`: version, commit, host, times, ...), the
  stages' statuses as the index computes them (`gb.stage.*`), the run's path and kind;
- artifacts: the stage records and configs, metrics.csv, the tables and the figures.

The default store is SQLite, `<dir>/mlflow.db`, with artifacts in `<dir>/mlflow-artifacts/`, so
`mlflow ui --backend-store-uri sqlite:///runs/mlflow.db` browses it. Exporting again skips runs whose
records did not change (a fingerprint tag) and adds a new MLflow run for a run that did; nothing is
ever deleted from the store. Files are read as untrusted data; symlinks are never followed.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import posixpath
import re
import time
from pathlib import Path

from gbcli.config.schema import EXPERIMENT_NAME, tracking_uri_problem
from gbcli.errors import GbError
from gbcli.text import quoted, shorten
from gbcli.store.safe import check_tree, entries_below, files_below, is_file, is_link, present, read_csv_untrusted, read_untrusted, subdirs
from gbcli.runs.index import RunInfo, read_any, scan
from gbcli.store import layout
from gbcli.store.layout import RunDir, SweepDir

MAX_PARAM = 500   # characters of a parameter value (MLflow's own limit is larger; lists of classes are long)
CURVES = ("train_loss", "train_error", "val_error", "weight_norm", "normalized_margin", "lr")




def _client(tracking_uri: str):
    # a tracking server that does not answer: one try of 10 s, not MLflow's minutes of retries
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise GbError("gb runs export mlflow: MLflow is not installed (pip install 'gbcli[mlflow]')") from None
    # MLflow's own log lines (its database being created; the traceback of a database error, which gb
    # then reports in one line) are not gb's messages: a refusal stays one line on stderr
    logging.getLogger("mlflow").setLevel(logging.CRITICAL)
    return MlflowClient(tracking_uri=tracking_uri)


def check_experiment(name: str) -> None:
    """An experiment name is a name, never a path (MLflow would put its artifacts there)."""
    if not EXPERIMENT_NAME.fullmatch(name) or ".." in name:
        raise GbError(f"--experiment: {quoted(name, 60)} is not a name (letters, digits, space and _ . + = -, "
                      f"1-200 characters, starting with a letter or digit, no '..')")


def default_uri(root: Path) -> str:
    """SQLite in `root`. A path holding a character that a URI reads as syntax (? # %) or a control
    character is refused: the database would land elsewhere than the path gb reports."""
    path = (Path(root) / layout.MLFLOW_DB).resolve()
    odd = sorted({c for c in str(path) if c in "?#%" or not c.isprintable()})
    if odd:
        raise GbError(f"--dir: {quoted(str(root), 120)} holds {', '.join(map(repr, odd))}, which a sqlite URI cannot "
                      f"carry; use another folder or --tracking-uri")
    return f"sqlite:///{path}"


def check_uri(uri: str, key: str = "--tracking-uri") -> None:
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower() if ":" in uri else ""
    why = tracking_uri_problem(uri)   # the one rule, the config's `tracking.mlflow` too
    if why is not None:
        raise GbError(f"{key}: {quoted(uri, 120)} {why}")
    # A SQLite database that cannot be opened: MLflow retries it for ~100 s before failing, so it is
    # refused now. sqlite:///<path> (sqlite:////<absolute path>); sqlite:// alone is in memory.
    rest = uri.split("://", 1)[1] if scheme == "sqlite" and "://" in uri else ""
    db = rest[1:].split("?", 1)[0] if rest.startswith("/") else ""
    if db and db != ":memory:":
        from gbcli.config.loading import _read_only

        path = Path(db)
        folder = path.parent
        try:   # SQLite writes its journal beside the database: the folder must take new files too
            why = ("its folder does not exist" if not folder.is_dir() else
                   "its folder is not writable" if not os.access(folder, os.W_OK | os.X_OK) or _read_only(folder) else
                   "not a regular file" if present(path) and not is_file(path) else
                   "not readable and writable" if present(path) and not os.access(path, os.R_OK | os.W_OK)
                   else None)
        except OSError as exc:
            why = exc.strerror or str(exc)
        if why is not None:
            raise GbError(f"{key}: cannot open the SQLite database {shorten(str(path), 200)}: {why}")


def _fingerprint(path: Path, under: str = "") -> str:
    """A hash of a run's records (what the export shows): unchanged records, no new MLflow run.
    `under`: of the records in that folder only (`gd`: the training)."""
    h = hashlib.sha256()
    for rel in sorted(str(p.relative_to(path)) for p in files_below(path / under if under else path)
                      if p.name in layout.STAGE_RECORDS):
        try:
            h.update(rel.encode() + read_untrusted(path / rel, 64 * 1024 ** 2))
        except (OSError, ValueError):
            h.update(rel.encode() + b"?")
    return h.hexdigest()[:16]


def _artifacts(path: Path, kind: str) -> list[tuple[Path, str]]:
    """(file, folder in the artifact store) of a run or sweep directory; never a symlink."""
    L = layout
    pats = ([L.MARKER, L.CONFIG, L.SWEEP, f"{L.TABLES}/*.csv", f"{L.FIGURES}/*.png"] if kind == "sweep" else
            [L.MARKER, L.LOG, f"{L.GD}/{L.CONFIG}", f"{L.GD}/{L.SUMMARY}", f"{L.GD}/{L.METRICS}", f"{L.SVM}/*/{L.RESULT}",
             f"{L.SVM}/*/{L.CONFIG}", f"{L.TABLES}/*.csv", f"{L.FIGURES}/*.png"])
    out = []
    for pat in pats:
        for f in sorted(path.glob(pat)):
            if is_file(f) and not any(is_link(path / p) for p in f.relative_to(path).parents if str(p) != "."):
                parent = str(f.parent.relative_to(path))
                out.append((f, "" if parent == "." else parent))
    return out


def _curves(path: Path) -> list[tuple[str, float, int]]:
    metrics = RunDir(path).metrics
    if not is_file(metrics):
        return []
    try:
        frame = read_csv_untrusted(metrics)
    except Exception:   # noqa: BLE001 (a corrupt table: the export goes on without its curves)
        return []
    import pandas as pd

    out = []
    # a row without a usable step (an empty cell, text, a fraction, out of MLflow's range) cannot be
    # placed on a curve: it is left out, the other rows and the run are exported; no step column: the
    # rows in order
    steps = (pd.to_numeric(frame["step"], errors="coerce") if "step" in frame.columns
             else pd.Series(range(len(frame)), dtype=float))
    for col in frame.columns:
        if col in ("step", "epoch"):
            continue
        try:
            values = frame[col].astype(float)
        except (TypeError, ValueError):
            continue
        for step, v in zip(steps, values):
            if math.isfinite(v) and math.isfinite(step) and step == int(step) and 0 <= step < 2 ** 53:
                out.append((col, float(v), int(step)))
    return out


def path_id(path: Path) -> str:
    """The tag that finds a directory's MLflow run (a value a filter can quote)."""
    return hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:16]


def runs_of(client, experiment: str, path: Path) -> list:
    """Every MLflow run of the directory `path` in `experiment`, newest first, however many (pages)."""
    path = Path(path).resolve()
    out, token = [], None
    while True:
        page = client.search_runs([experiment], filter_string=f"tags.`gb.path_id` = '{path_id(path)}'",
                                  max_results=1000, page_token=token, order_by=["attributes.start_time DESC"])
        out += [r for r in page if r.data.tags.get("gb.path") == str(path)]
        token = page.token
        if not token:
            return out


def run_tags(info: RunInfo, parent: str | None = None) -> dict[str, str]:
    """The tags of a directory's MLflow run: where it is, its statuses, provenance and labels."""
    path = info.path.resolve()
    tags = {"gb.path": str(path), "gb.path_id": path_id(path), "gb.kind": info.kind, "gb.status": info.status,
            "gb.fingerprint": _fingerprint(info.path), "gb.fingerprint.gd": _fingerprint(info.path, layout.GD),
            **{f"gb.stage.{k}": v for k, v in info.stages.items()}}
    for k, v in _provenance(info.path).items():
        if isinstance(v, (str, int, float, bool)) or v is None:
            tags[f"gb.provenance.{k}"] = str(v)[:5000]
    if parent is not None:
        tags["mlflow.parentRunId"] = parent
    tags.update({f"gb.tag.{k}": v for k, v in info.labels.get("tags", {}).items()})
    if info.labels.get("note"):
        tags["mlflow.note.content"] = info.labels["note"]   # MLflow shows it as the run's description
    if info.labels.get("name"):
        tags["gb.name"] = info.labels["name"]
    return tags


def _provenance(path: Path, which: str | None = None) -> dict:
    from gbcli.runs.index import show

    prov = show(path).get("provenance") or {}
    if which == "all":
        return prov
    main = prov.get("gd") or prov.get("sweep") or prov.get("created") or {}
    return main if isinstance(main, dict) else {}


def _log_run(client, experiment: str, info: RunInfo, name: str, parent: str | None = None) -> tuple[str, bool]:
    """One MLflow run for `info` (skipped when an identical, finished export exists); returns (run id,
    created)."""
    fingerprint, training = _fingerprint(info.path), _fingerprint(info.path, layout.GD)
    kept = live = None
    for r in runs_of(client, experiment, info.path):
        tags = r.data.tags
        if kept is None and tags.get("gb.fingerprint") == fingerprint and tags.get("gb.exported") == "yes":
            kept = r.info.run_id
            continue
        if live is None and tags.get("gb.live") == "yes" and tags.get("gb.fingerprint.gd") == training:
            live = r   # tracked while it trained, the same training since: its curves (real times) stay
            continue
        # its records changed since, or an export stopped partway: replaced, never a second run of it
        client.delete_run(r.info.run_id)
    if kept is not None:
        if live is not None:
            client.delete_run(live.info.run_id)
        return kept, False
    if live is not None:   # later stages changed: the same MLflow run takes their results
        log_params(client, live.info.run_id, info.config, live.data.params)
        seal(client, live.info.run_id, info, curves=False)
        return live.info.run_id, True
    tags = run_tags(info, parent)
    if info.labels.get("name") and parent is None:
        name = info.labels["name"]
    start, _ = _times(_provenance(info.path, "all"))
    run = client.create_run(experiment, run_name=name, tags=tags, start_time=start)
    rid = run.info.run_id
    try:
        log_params(client, rid, info.config)
        seal(client, rid, info, curves=True)
    except BaseException:
        with contextlib.suppress(Exception):
            client.set_terminated(rid, status="FAILED")   # not "exported": the next export redoes it
        raise
    return rid, True


def log_params(client, rid: str, config: dict, have: dict | None = None) -> None:
    """The flattened config as parameters (those not in `have`: MLflow refuses a changed value)."""
    from mlflow.entities import Param

    params = [Param(k, str(v)[:MAX_PARAM]) for k, v in config.items()   # tracking.*: where, not what (a URI may hold a secret)
              if k != "name" and not k.startswith("tracking.") and k not in (have or {})]
    for i in range(0, len(params), 100):   # MLflow takes at most 100 parameters a batch
        client.log_batch(rid, params=params[i:i + 100])


def seal(client, rid: str, info: RunInfo, curves: bool) -> None:
    """Log a directory's results, artifacts and tags into its MLflow run (the training curves from
    metrics.csv too when `curves`) and end it, FINISHED or FAILED as its records say; the tags
    `gb.fingerprint` and `gb.exported` then tell a later export that the run is up to date."""
    prov = _provenance(info.path, "all")
    _, end = _times(prov)
    _log_contents(client, rid, info, end, _times({"gd": prov.get("gd")}), curves)
    from mlflow.entities import RunTag

    client.log_batch(rid, tags=[RunTag(k, v) for k, v in {**run_tags(info), "gb.exported": "yes"}.items()])
    client.set_terminated(rid, status="FINISHED" if info.status in ("complete", "solved", "trained") else "FAILED", end_time=end)


def _times(prov: dict) -> tuple[int | None, int | None]:
    """(start, end) of a run in ms since the epoch: its records' earliest `started` and latest `ended`
    (provenance); None when no record says (MLflow then takes the export's time)."""
    import datetime as dt

    starts, ends = [], []
    for rec in prov.values():
        for key, into in (("started", starts), ("ended", ends)):
            value = rec.get(key) if isinstance(rec, dict) else None
            if isinstance(value, str) and len(value) < 40:
                with contextlib.suppress(ValueError):
                    into.append(int(dt.datetime.fromisoformat(value).timestamp() * 1000))
    start = min(starts) if starts else None
    end = max(ends) if ends else None
    if start is not None and end is not None and end < start:
        end = start
    return start, end


def _log_contents(client, rid: str, info: RunInfo, end: int | None, training: tuple[int | None, int | None],
                  curves: bool = True) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    points = _curves(info.path) if curves else []
    # the results at the time the run ended; the training curve's points spread over the training's
    # own wall time in proportion to their step (metrics.csv holds steps, not times)
    last = max((step for _, _, step in points), default=0) or 1
    t0, t1 = training[0] or end or now, training[1] or end or now
    metrics = [Metric(k, v, end or now, 0) for k, v in info.numbers.items()]
    metrics += [Metric(k, v, t0 + (t1 - t0) * step // last, step) for k, v, step in points]
    for i in range(0, len(metrics), 1000):
        client.log_batch(rid, metrics=metrics[i:i + 1000])
    for f, folder in _artifacts(info.path, info.kind):
        client.log_artifact(rid, str(f), artifact_path=folder or None)


def export(root: str | Path = "runs", tracking_uri: str | None = None, experiment: str = "gb",
           echo=None) -> dict:
    """Log every run and sweep under `root` (a sweep with its points as child runs) into the MLflow
    store at `tracking_uri` (default: SQLite in `root`); returns counts of what was logged. Messages
    go to `echo` (default: the `gbcli` logger)."""
    echo = echo or logging.getLogger("gbcli").info
    root = Path(root)
    if not root.is_dir():
        raise GbError(f"--dir: {root}: not a directory")
    check_experiment(experiment)
    for path in (root / layout.MLFLOW_DB, root / layout.MLFLOW_ARTIFACTS):   # the store gb writes in DIR
        if is_link(path):
            raise GbError(f"--dir: {shorten(str(path), 200)}: is a symlink; gb never writes through one (replace it "
                          f"by the file or folder itself)")
    check_tree(root / layout.MLFLOW_ARTIFACTS)
    for _ in entries_below(root):   # a tree deeper than gb makes is refused before the store is touched
        pass
    if tracking_uri is not None:
        check_uri(tracking_uri)
    uri = tracking_uri or default_uri(root)
    if tracking_uri is None:
        check_uri(uri, "--dir")   # a read-only DIR: refused now, not after MLflow's retries
    # A config key MLflow refuses as a parameter name (MLflow's rule; a sweep's config.yaml keeps the
    # user's model.weights names as given) would stop the export partway: refused before the store
    # is touched, naming the directory. The keys are those `log_params` logs.
    for info in scan(root):
        for one in [info, *(read_any(p) for p in subdirs(SweepDir(info.path).points))] if info.kind == "sweep" else [info]:
            for key in map(str, one.config):
                if key == "name" or key.startswith("tracking."):
                    continue
                if (not re.fullmatch(r"[/\w.\- :]{1,250}", key) or posixpath.normpath(key) != key
                        or key.startswith(("/", ".."))):
                    raise GbError(f"--dir: {shorten(str(one.path), 200)}: its config key {quoted(key, 80)} is not a name "
                                  f"MLflow takes for a parameter (letters, digits, _ - . : / and space, at most 250 "
                                  f"characters, no empty or '..' part)")
    try:
        return _export(_client(uri), root, uri, experiment, echo)
    except GbError:
        raise
    except Exception as exc:   # MLflow's own refusals, a server that does not answer, a full disk
        cause = exc   # the words of sqlite or of the system (a full disk), not those of MLflow's wrapper
        for _ in range(8):
            if cause is None or isinstance(cause, OSError) or type(cause).__module__ == "sqlite3":
                exc = cause or exc
                break
            cause = cause.__cause__ or cause.__context__
        first = (str(exc).strip().splitlines() or [""])[0]
        if isinstance(exc, OSError) and exc.strerror:
            first = f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
        raise GbError(f"gb runs export mlflow: {uri}: {type(exc).__name__}: {shorten(first, 200)}") from None


def _export(client, root: Path, uri: str, experiment: str, echo) -> dict:
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        where = (root / layout.MLFLOW_ARTIFACTS / experiment).resolve() if uri.startswith("sqlite:") else None
        exp_id = client.create_experiment(experiment, artifact_location=where.as_uri() if where else None)
    else:
        exp_id = exp.experiment_id
    counts = {"runs": 0, "sweeps": 0, "points": 0, "unchanged": 0}
    for info in scan(root):
        if info.kind == "foreign":
            echo(f"skipped {info.path}: {info.note}")
            continue
        name = str(info.path.relative_to(root)) if info.path != root else info.path.name
        rid, created = _log_run(client, exp_id, info, name)
        counts["sweeps" if info.kind == "sweep" else "runs"] += created
        counts["unchanged"] += not created
        if info.kind == "sweep":
            for point in subdirs(SweepDir(info.path).points):
                _, made = _log_run(client, exp_id, read_any(point), f"{name}/{point.name}", parent=rid)
                counts["points"] += made
                counts["unchanged"] += not made
    echo(f"exported to {uri} (experiment {experiment}): {counts['runs']} runs, {counts['sweeps']} sweeps with "
         f"{counts['points']} points; {counts['unchanged']} unchanged since the last export")
    return {"tracking_uri": uri, "experiment_id": exp_id, **counts}
