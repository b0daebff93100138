"""A finished run in a notebook: `gbcli.load_run(path)` gives its config, trained network, metrics, program
records and tables, read as untrusted data (never unpickled); it takes what `gb runs show` takes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from gbcli.config.loading import read_stored_config, validate
from gbcli.errors import GbError
from gbcli.fs.layout import RunDir
from gbcli.fs.safe import is_file, read_csv_untrusted, subdirs
from gbcli.reports.tables import read_tables
from gbcli.runs.index import grid_axes, resolve, sweep_points
from gbcli.store.labels import read_labels
from gbcli.store.lock import dir_kind
from gbcli.store.records import GdStatus
from gbcli.store.views import RunView, SweepView


@dataclass(repr=False)
class Run:
    """What a run (or sweep) directory holds: `model` the trained network (None when not trained); `results`
    each program's record with the status gb computes; the tables None before `gb compare`. A sweep has its
    base config as a dict, `points` (id, readable name, the keys that vary) and `axes` (their values)."""

    path: Path
    config: object
    model: object = None
    summary: dict | None = None
    metrics: pd.DataFrame | None = None
    results: dict[str, dict] = field(default_factory=dict)
    errors: pd.DataFrame | None = None
    inconsistency: pd.DataFrame | None = None
    kind: str = "run"
    name: str | None = None
    points: pd.DataFrame | None = None
    axes: dict[str, list] = field(default_factory=dict)

    def __repr__(self) -> str:
        def rows(frame) -> str:
            return "none" if frame is None else f"{len(frame)} rows"

        head = f"Run({str(self.path)!r}, {self.kind}" + (f", name {self.name!r}" if self.name else "") + ")"
        if self.kind == "sweep":
            points = 0 if self.points is None else len(self.points)
            axes = "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in self.axes.items()) or "none"
            body = [f"  {points} points; axes: {axes}"]
        else:
            stages = ([f"gd {self.summary['status']}"] if self.summary is not None else []) + \
                [f"{k} {v.get('status')}" for k, v in self.results.items()]
            body = [f"  stages: {', '.join(stages) or 'none'}; model: {'trained' if self.model is not None else 'none'}"
                    f"; metrics: {rows(self.metrics)}"]
        body.append(f"  tables: errors {rows(self.errors)}, inconsistency {rows(self.inconsistency)}")
        return "\n".join([head, *body])


def load_run(path: str | Path, root: str | Path = "runs") -> Run:
    """The run or sweep `path` names (`gbcli.runs.index.resolve`); GbError when it names none, or a run that holds
    no config."""
    path = resolve(path, root, "RUN")
    kind = dir_kind(path, key="RUN")
    if kind == "sweep":
        sweep, points = SweepView(path), sweep_points(path)
        out = Run(sweep.root, sweep.config(), name=read_labels(path).get("name"), kind="sweep",
                  points=pd.DataFrame(points) if points else None, axes=grid_axes(path))
        if is_file(RunDir(path).errors):
            out.errors, out.inconsistency = read_tables(path)
        return out
    if kind != "run":
        raise GbError(f"RUN: {path}: not a run directory, nor a sweep")
    from gbcli.runs.stages import load_trained, prepare

    view = RunView(path)
    run = view.dir
    configs = [run.gd_config, *(run.program_config(s.name) for s in subdirs(run.svm, hidden=False))]
    source = next((c for c in configs if is_file(c)), None)
    if source is None:
        raise GbError(f"RUN: {run.root}: holds no stage's config.yaml (nothing was run there)")
    try:
        raw = read_stored_config(source, strict=True)
    except (OSError, ValueError, yaml.YAMLError, RecursionError) as exc:   # received data: refused in one line
        raise GbError(f"RUN: {source}: not a readable gb config ({type(exc).__name__})") from None
    cfg = validate(raw, str(source))
    out = Run(run.root, cfg, name=read_labels(run.root).get("name"))
    summary = view.gd()
    if summary is not None:
        out.summary = {**summary.fields, "status": summary.status}
        if summary.status == GdStatus.OK:
            out.model = load_trained(run.root, cfg, prepare(cfg).dataset.dim, "load_run")
    if is_file(run.metrics):
        out.metrics = view.metrics()
    out.results = {name: {**rec.fields, "status": rec.status} for name, rec in view.programs().items()}
    if is_file(run.errors) and is_file(run.inconsistency):
        out.errors, out.inconsistency = read_csv_untrusted(run.errors), read_csv_untrusted(run.inconsistency)
    return out
