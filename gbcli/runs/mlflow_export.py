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

import hashlib
import logging
import math
from pathlib import Path

from gbcli.errors import GbError
from gbcli.store.safe import is_file, is_link, read_csv_untrusted, read_untrusted, subdirs
from gbcli.runs.index import RunInfo, read_any, scan
from gbcli.store import layout
from gbcli.store.layout import RunDir, SweepDir

MAX_PARAM = 500   # characters of a parameter value (MLflow's own limit is larger; lists of classes are long)
CURVES = ("train_loss", "train_error", "val_error", "weight_norm", "normalized_margin", "lr")


def _client(tracking_uri: str):
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise GbError("gb runs export mlflow: MLflow is not installed (pip install 'gbcli[mlflow]')") from None
    return MlflowClient(tracking_uri=tracking_uri)


def default_uri(root: Path) -> str:
    return f"sqlite:///{(Path(root) / 'mlflow.db').resolve()}"


def _fingerprint(path: Path) -> str:
    """A hash of a run's records (what the export shows): unchanged records, no new MLflow run."""
    h = hashlib.sha256()
    for rel in sorted(str(p.relative_to(path)) for p in path.rglob("*")
                      if p.name in layout.STAGE_RECORDS and is_file(p)):
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
    """One MLflow run for `info` (skipped when an identical export exists); returns (run id, created)."""
    from mlflow.entities import Metric, Param

    path = info.path.resolve()
    fingerprint = _fingerprint(info.path)
    found = client.search_runs([experiment], filter_string=f"tags.`gb.fingerprint` = '{fingerprint}'", max_results=50)
    for r in found:
        if r.data.tags.get("gb.path") == str(path):
            return r.info.run_id, False
    tags = {"gb.path": str(path), "gb.kind": info.kind, "gb.status": info.status, "gb.fingerprint": fingerprint,
            **{f"gb.stage.{k}": v for k, v in info.stages.items()}}
    from gbcli.runs.index import show

    prov = (show(info.path).get("provenance") or {})
    main = prov.get("gd") or prov.get("sweep") or prov.get("created") or {}
    for k, v in (main.items() if isinstance(main, dict) else ()):
        if isinstance(v, (str, int, float, bool)) or v is None:
            tags[f"gb.provenance.{k}"] = str(v)[:5000]
    if parent is not None:
        tags["mlflow.parentRunId"] = parent
    run = client.create_run(experiment, run_name=name, tags=tags)
    rid = run.info.run_id
    params = [Param(k, str(v)[:MAX_PARAM]) for k, v in info.config.items() if k not in ("name",)]
    for i in range(0, len(params), 100):   # MLflow takes at most 100 parameters a batch
        client.log_batch(rid, params=params[i:i + 100])
    metrics = [Metric(k, v, 0, 0) for k, v in info.numbers.items()]
    metrics += [Metric(k, v, 0, step) for k, v, step in _curves(info.path)]
    for i in range(0, len(metrics), 1000):
        client.log_batch(rid, metrics=metrics[i:i + 1000])
    for f, folder in _artifacts(info.path, info.kind):
        client.log_artifact(rid, str(f), artifact_path=folder or None)
    client.set_terminated(rid, status="FINISHED" if info.status in ("complete", "solved") else "FAILED")
    return rid, True


def export(root: str | Path = "runs", tracking_uri: str | None = None, experiment: str = "gb",
           echo=None) -> dict:
    """Log every run and sweep under `root` (a sweep with its points as child runs) into the MLflow
    store at `tracking_uri` (default: SQLite in `root`); returns counts of what was logged. Messages
    go to `echo` (default: the `gbcli` logger)."""
    echo = echo or logging.getLogger("gbcli").info
    root = Path(root)
    if not root.is_dir():
        raise GbError(f"--dir: {root}: not a directory")
    uri = tracking_uri or default_uri(root)
    client = _client(uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        where = (root / "mlflow-artifacts" / experiment).resolve() if uri.startswith("sqlite:") else None
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
