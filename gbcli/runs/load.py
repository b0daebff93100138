"""A finished run in a notebook: `gbcli.load_run(path)` gives its config, trained network, metrics,
program records and tables, read through the store as untrusted data (never unpickled)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from gbcli.config.loading import load_yaml_text, validate
from gbcli.errors import GbError
from gbcli.store.layout import RunDir
from gbcli.store.lock import dir_kind
from gbcli.store.records import gd_status, stage_status
from gbcli.store.safe import is_file, read_csv_untrusted, read_record, read_text_untrusted, subdirs
from gbcli.store.records import read_metrics
from gbcli.store import layout


@dataclass
class Run:
    """What a run directory holds. `model` is the trained network (None when not trained);
    `results` maps each solved program to its record, with `status` as gb computes it from the
    record's own numbers (`gbcli.store.records`); `errors` / `inconsistency` are None before `gb compare`."""

    path: Path
    config: object
    model: object = None
    summary: dict | None = None
    metrics: pd.DataFrame | None = None
    results: dict[str, dict] = field(default_factory=dict)
    errors: pd.DataFrame | None = None
    inconsistency: pd.DataFrame | None = None


def load_run(path: str | Path) -> Run:
    """The run at `path` (a run directory, or one point of a sweep: `OUT/points/<id>`); GbError when
    it is not one or holds no config."""
    from gbcli.runs.stages import load_trained, prepare

    run = RunDir(path)
    if dir_kind(run.root, key="RUN") != "run":
        raise GbError(f"RUN: {run.root}: not a run directory (a sweep's points are OUT/points/<id>)")
    configs = [run.gd_config, *(s / layout.CONFIG for s in subdirs(run.svm, hidden=False))]
    source = next((c for c in configs if is_file(c)), None)
    if source is None:
        raise GbError(f"RUN: {run.root}: holds no stage's config.yaml (nothing was run there)")
    cfg = validate(load_yaml_text(read_text_untrusted(source, 10_000_000)), str(source))
    out = Run(run.root, cfg)
    summary = read_record(run.summary)
    if summary is not None:
        out.summary = {**summary, "status": gd_status(summary)}
        if out.summary["status"] == "ok":
            out.model = load_trained(run.root, cfg, prepare(cfg).dataset.dim, "load_run")
    if is_file(run.metrics):
        out.metrics = read_metrics(run.metrics)
    for record in run.results():
        rec = read_record(record)
        if rec is not None:
            out.results[record.parent.name] = {**rec, "status": stage_status(record, rec)}
    if is_file(run.errors) and is_file(run.tables / layout.INCONSISTENCY):
        out.errors = read_csv_untrusted(run.errors)
        out.inconsistency = read_csv_untrusted(run.tables / layout.INCONSISTENCY)
    return out
