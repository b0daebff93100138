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
import re
import time
from pathlib import Path

from gbcli.errors import GbError
from gbcli.text import quoted, shorten
from gbcli.store.safe import check_tree, entries_below, files_below, is_file, is_link, read_csv_untrusted, read_untrusted, subdirs
from gbcli.runs.index import RunInfo, read_any, scan
from gbcli.store import layout
from gbcli.store.layout import RunDir, SweepDir

MAX_PARAM = 500   # characters of a parameter value (MLflow's own limit is larger; lists of classes are long)
CURVES = ("train_loss", "train_error", "val_error", "weight_norm", "normalized_margin", "lr")


EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.+=-]{0,199}")
URI_SCHEMES = ("sqlite", "file", "http", "https", "postgresql", "mysql", "mssql", "databricks")


def _client(tracking_uri: str):
    # a tracking server that does not answer: one try of 10 s, not MLflow's minutes of retries
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise GbError("gb runs export mlflow: MLflow is not installed (pip install 'gbcli[mlflow]')") from None
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


def check_uri(uri: str) -> None:
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower() if ":" in uri else ""
    plain_path = scheme == "" and uri.strip() != ""   # a folder: MLflow's file store
    if (scheme not in URI_SCHEMES and not plain_path) or any(not c.isprintable() for c in uri):
        raise GbError(f"--tracking-uri: {quoted(uri, 120)} is not a tracking URI gb exports to "
                      f"({', '.join(URI_SCHEMES)})")


def _fingerprint(path: Path) -> str:
    """A hash of a run's records (what the export shows): unchanged records, no new MLflow run."""
    h = hashlib.sha256()
    for rel in sorted(str(p.relative_to(path)) for p in files_below(path) if p.name in layout.STAGE_RECORDS):
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
    out = []
    steps = frame["step"] if "step" in frame.columns else range(len(frame))
    for col in frame.columns:
        if col in ("step", "epoch"):
            continue
        try:
            values = frame[col].astype(float)
        except (TypeError, ValueError):
            continue
        for step, v in zip(steps, values):
            if math.isfinite(v):
                out.append((col, float(v), int(step)))
    return out


def _log_run(client, experiment: str, info: RunInfo, name: str, parent: str | None = None) -> tuple[str, bool]:
    """One MLflow run for `info` (skipped when an identical, finished export exists); returns (run id,
    created)."""
    path = info.path.resolve()
    fingerprint = _fingerprint(info.path)
    path_id = hashlib.sha256(str(path).encode()).hexdigest()[:16]   # a tag value a filter can quote
    kept = None
    token = None
    while True:   # every earlier export of this directory, however many (pages of 1,000)
        page = client.search_runs([experiment], filter_string=f"tags.`gb.path_id` = '{path_id}'",
                                  max_results=1000, page_token=token)
        for r in page:
            if r.data.tags.get("gb.path") != str(path):
                continue
            if kept is None and r.data.tags.get("gb.fingerprint") == fingerprint and r.data.tags.get("gb.exported") == "yes":
                kept = r.info.run_id
                continue
            # its records changed since, or an export stopped partway: replaced, never a second run of it
            client.delete_run(r.info.run_id)
        token = page.token
        if not token:
            break
    if kept is not None:
        return kept, False
    tags = {"gb.path": str(path), "gb.path_id": path_id, "gb.kind": info.kind, "gb.status": info.status, "gb.fingerprint": fingerprint,
            **{f"gb.stage.{k}": v for k, v in info.stages.items()}}
    from gbcli.runs.index import show

    prov = (show(info.path).get("provenance") or {})
    main = prov.get("gd") or prov.get("sweep") or prov.get("created") or {}
    for k, v in (main.items() if isinstance(main, dict) else ()):
        if isinstance(v, (str, int, float, bool)) or v is None:
            tags[f"gb.provenance.{k}"] = str(v)[:5000]
    if parent is not None:
        tags["mlflow.parentRunId"] = parent
    tags.update({f"gb.tag.{k}": v for k, v in info.labels.get("tags", {}).items()})
    if info.labels.get("note"):
        tags["mlflow.note.content"] = info.labels["note"]   # MLflow shows it as the run's description
    if info.labels.get("name"):
        tags["gb.name"] = info.labels["name"]
        name = info.labels["name"] if parent is None else name
    start, end = _times(prov)
    run = client.create_run(experiment, run_name=name, tags=tags, start_time=start)
    rid = run.info.run_id
    try:
        _log_contents(client, rid, info, end, _times({"gd": prov.get("gd")}))
    except BaseException:
        with contextlib.suppress(Exception):
            client.set_terminated(rid, status="FAILED")   # not "exported": the next export redoes it
        raise
    client.set_tag(rid, "gb.exported", "yes")
    client.set_terminated(rid, status="FINISHED" if info.status in ("complete", "solved") else "FAILED", end_time=end)
    return rid, True


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


def _log_contents(client, rid: str, info: RunInfo, end: int | None, training: tuple[int | None, int | None]) -> None:
    from mlflow.entities import Metric, Param

    params = [Param(k, str(v)[:MAX_PARAM]) for k, v in info.config.items() if k not in ("name",)]
    for i in range(0, len(params), 100):   # MLflow takes at most 100 parameters a batch
        client.log_batch(rid, params=params[i:i + 100])
    now = int(time.time() * 1000)
    curves = _curves(info.path)
    # the results at the time the run ended; the training curve's points spread over the training's
    # own wall time in proportion to their step (metrics.csv holds steps, not times)
    last = max((step for _, _, step in curves), default=0) or 1
    t0, t1 = training[0] or end or now, training[1] or end or now
    metrics = [Metric(k, v, end or now, 0) for k, v in info.numbers.items()]
    metrics += [Metric(k, v, t0 + (t1 - t0) * step // last, step) for k, v, step in curves]
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
    try:
        return _export(_client(uri), root, uri, experiment, echo)
    except GbError:
        raise
    except Exception as exc:   # MLflow's own refusals, a server that does not answer, a full disk
        first = (str(exc).strip().splitlines() or [""])[0]
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
