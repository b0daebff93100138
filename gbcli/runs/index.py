"""The index behind `gb runs` (list, show, diff) and the MLflow export, read as untrusted data (no symlink
followed, a corrupt file reported, never raised). Statuses are computed: `optimal` only when the certificate
fields bear it out, `stale` when a manifest no longer matches its network or problem, `unfinished` without a
record, `foreign` when the record is not gb's."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

from gbcli.errors import GbError
from gbcli.fs import layout
from gbcli.store.labels import read_labels
from gbcli.fs.layout import RunDir, SweepDir
from gbcli.reports.tables import mean_of, read_rows
from gbcli.reports.views import grid_line
from gbcli.store.lock import dir_kind
from gbcli.store.records import ProgramRecord, Verdict, number, run_state, sweep_state
from gbcli.store.views import RunView, SweepView
from gbcli.fs.safe import flatten, is_dir, is_file, mtime, present, read_record, subdirs
from gbcli.text import shorten

KEY_COLUMNS = {"dataset.name": "", "dataset.train_size": "N=", "model.kind": "", "model.hidden_units": "H=",
               "contexts.count": "C=", "contexts.seed": "seed=", "training.momentum": "m="}   # -> prefix in a listing


@dataclasses.dataclass
class RunInfo:
    """One run or sweep directory as the index sees it."""

    path: Path
    kind: str                       # run | sweep | foreign
    status: str                     # complete | partial | empty | failed | foreign (a run); for a sweep: its points
    stages: dict[str, str]          # "gd" / "<objective>" / "points" -> status
    config: dict[str, Any]          # the flattened config (a run: gd's or a program's; a sweep: its base)
    numbers: dict[str, float]       # headline numbers: "<predictor>.val_error", "<objective>.objective", ...
    time: str                       # when the newest record was written (UTC, from its provenance or mtime)
    note: str = ""
    labels: dict = dataclasses.field(default_factory=dict)   # the user's name, tags and note (store.labels)
    axes: dict = dataclasses.field(default_factory=dict)     # a sweep: each config key its points vary, with its values

    def brief(self, root: Path | None = None) -> dict:
        """The row of a terminal listing: the key values in one column, the headline errors in two."""
        config = " ".join(f"{p}{self.config[k]}" for k, p in KEY_COLUMNS.items()
                          if k in self.config and k not in self.axes)
        if self.axes:   # a sweep: what its points vary, not the base config's one value of it
            config = f"{config} {grid_line(self.axes)}".strip()
        gd = [v for k, v in self.numbers.items() if k.startswith("gd-") and k.endswith(".val_error")]
        svm = {k.split(".")[0]: v for k, v in self.numbers.items() if not k.startswith("gd-") and k.endswith(".val_error")}
        best = min(svm.items(), key=lambda kv: kv[1]) if svm else None
        incons = {k.split(".")[0]: v for k, v in self.numbers.items() if k.endswith(".inconsistency")}
        expected = [v for k, v in self.numbers.items() if k.endswith(".expected_if_uncorrelated")]
        full = self.row(root)
        named = f"{full['run']} ({self.labels['name']})" if self.labels.get("name") else full["run"]
        return {"run": named, "kind": self.kind, "status": self.status, "time": self.time[:16].replace("T", " "),
                "stages": full["stages"], "config": config or self.note,
                "gd val err": f"{gd[0]:.4f}" if gd else "",
                "best svm val err": f"{best[1]:.4f} ({best[0]})" if best else "",
                "inconsistency (vs gd)": ", ".join(f"{k} {v:.4f}" for k, v in incons.items()),
                "2p(1-p)": f"{expected[0]:.4f}" if expected else ""}

    def row(self, root: Path | None = None) -> dict:
        name = str(self.path.relative_to(root)) if root is not None and self.path.is_relative_to(root) else str(self.path)
        out = {"run": name, "kind": self.kind, "status": self.status, "time": self.time,
               "stages": " ".join(f"{k}:{v}" for k, v in self.stages.items())}
        if self.labels:
            out["name"] = self.labels.get("name", "")
            out["tags"] = ",".join(f"{k}={v}" for k, v in self.labels.get("tags", {}).items())
        for k in KEY_COLUMNS:
            if k in self.config or k in self.axes:
                out[k] = self.axes.get(k, self.config.get(k))   # a sweep's axis: its values
        if self.axes:
            out["grid"] = ";".join(f"{k}={','.join(map(str, v))}" for k, v in self.axes.items())
        out.update({k: round(v, 6) for k, v in self.numbers.items()
                    if k.endswith(("val_error", ".inconsistency", ".expected_if_uncorrelated"))})
        return out


def _time_of(records: list[tuple[Path, Any]]) -> str:
    """When the newest record was written: its provenance's `ended`, else its file's mtime (UTC)."""
    times = []
    for path, rec in records:
        prov = rec.get("provenance") if rec is not None else None
        ended = prov.get("ended") if isinstance(prov, dict) else None
        if isinstance(ended, str) and len(ended) < 40:
            times.append(ended)
        elif path.exists():
            with contextlib.suppress(OSError):   # removed meanwhile: no time of its own
                times.append(dt.datetime.fromtimestamp(mtime(path), dt.timezone.utc).isoformat(timespec="seconds"))
    return max(times) if times else ""


def _means_into(numbers: dict[str, float], table: Path, by: str, keys: tuple[str, ...], keep=lambda r: True,
                bounded: bool = False, order=list) -> None:
    """The mean of each of `keys` per value of the column `by` of `table` into `numbers` ("<by value>.<key>"; a
    fraction with `bounded`); nothing from a table that is missing or not gb's."""
    try:
        rows = read_rows(table)
        if not {by, *keys} <= set(rows.columns):
            return
        groups: dict[Any, list[dict]] = {}
        for r in rows.rows:
            if keep(r) and r[by] is not None:
                groups.setdefault(r[by], []).append(r)
        for name in order(groups):
            for k in keys:
                v = mean_of(r[k] for r in groups[name])
                if v is not None and (not bounded or 0 <= v <= 1):
                    numbers[f"{name}.{k}"] = v
    except Exception:   # noqa: BLE001 (no table yet, or not gb's: the listing goes on without the number)
        pass


def inconsistency_into(path: Path, numbers: dict[str, float]) -> None:
    """Each program's inconsistency with the GD network and 2p(1-p) of its pair into `numbers`, from
    tables/inconsistency.csv (a sweep's: the mean over its points)."""
    _means_into(numbers, RunDir(path).inconsistency, "predictor_a", ("inconsistency", "expected_if_uncorrelated"),
                keep=lambda r: str(r["predictor_b"]).startswith("gd-"), bounded=True)


def _numbers_into(numbers: dict[str, float], rec, name: str, keys: tuple[str, ...]) -> None:
    numbers.update({f"{name}.{k}": number(rec.get(k)) for k in keys if number(rec.get(k)) is not None})


def read_run(path: str | Path) -> RunInfo:
    """A run directory's stages (status computed as the module says), config and headline numbers."""
    from gbcli.store.identity import file_hash

    path, view = Path(path), RunView(path)
    run, summary = view.dir, view.dir.summary
    stages, numbers, records, config, gm = {}, {}, [], {}, None
    if present(summary):
        rec = view.gd()
        stages["gd"] = rec.status if rec is not None else Verdict.FOREIGN
        records.append((summary, rec))
        if rec is not None:
            gm = rec.manifest
            _numbers_into(numbers, rec, rec.get("predictor") if isinstance(rec.get("predictor"), str) else "gd",
                          ("train_error", "val_error"))
        config = flatten(view.config() or {})
    elif run.gd.is_dir():
        stages["gd"] = Verdict.UNFINISHED
    upstream = ""   # the trained network's hash, which a program's manifest names
    with contextlib.suppress(GbError):   # missing, a link, unreadable: no program's upstream matches
        upstream = file_hash(summary)
    for stage in subdirs(run.svm):
        record = stage / layout.RESULT
        if not record.exists():
            stages[stage.name] = Verdict.UNFINISHED
            continue
        rec = ProgramRecord.read(record)
        records.append((record, rec))
        m = rec.manifest if rec is not None else None
        status = rec.status if m is not None else Verdict.FOREIGN   # no manifest: not a stage gb finished
        if status != Verdict.FOREIGN and (gm is not None and m.get("problem") != gm.get("problem")
                                          or m.get("upstream") and m["upstream"] != upstream):
            status = Verdict.STALE
        stages[stage.name] = status
        if rec is not None:
            _numbers_into(numbers, rec, stage.name, ("val_error", "objective"))
        if not config:
            config = flatten(view.config(stage.name) or {})
    status = run_state(stages, is_file(run.errors))
    inconsistency_into(path, numbers)
    return RunInfo(path, "run", status, stages, config, numbers, _time_of(records), labels=read_labels(path))


def read_sweep(path: str | Path) -> RunInfo:
    """A sweep directory: its points (done, failed, interrupted, not run), base config and means."""
    path = Path(path)
    sweep = SweepView(path)
    meta = sweep.record()
    status, counts, total = sweep_state(path, meta and meta.points)
    stages = {k: str(v) for k, v in counts.items() if v}
    config = flatten(sweep.config() or {})
    numbers: dict[str, float] = {}
    _means_into(numbers, RunDir(path).errors, "predictor", ("val_error",), order=sorted)
    inconsistency_into(path, numbers)
    return RunInfo(path, "sweep", status, stages, config, numbers, _time_of([(sweep.dir.record, meta)]),
                   note=f"{total} points", labels=read_labels(path), axes=grid_axes(path))


def read_any(path: str | Path) -> RunInfo:
    path = Path(path)
    try:
        kind = dir_kind(path, key="RUN")
    except GbError as exc:
        return RunInfo(path, "foreign", "foreign", {}, {}, {}, "", note=str(exc))
    return read_sweep(path) if kind == "sweep" else read_run(path)


def _labelled(root: Path, depth: int = 2) -> list[Path]:
    """The runs and sweeps under `root` (itself, or its folders down to `depth` levels, never inside a run or sweep,
    never through a symlink), without reading their records."""
    if any(present(root / n) for n in (layout.MARKER, layout.GD, layout.SVM, layout.POINTS)):
        return [root]
    try:
        return [p for c in subdirs(root) for p in _labelled(c, depth - 1)] if depth > 0 else []
    except OSError:
        return []


def scan(root: str | Path = "runs", filters: dict[str, str] | None = None) -> list[RunInfo]:
    """The runs and sweeps under `root`, newest first, those that match every filter (dotted config key, kind or
    status -> value as text)."""
    root = Path(root)
    infos = [read_any(p) for p in _labelled(root)]
    if filters:
        known = {"kind", "status"} | {k for i in infos for k in i.config}
        unknown = sorted(set(filters) - known)
        if infos and unknown:   # a typo would otherwise list nothing, silently
            raise GbError(f"--where {shorten(unknown[0], 200)}: no run under {shorten(str(root), 200)} has this key "
                          f"(a config key such as model.hidden_units, or kind, status)")
        infos = [i for i in infos if _matches(i, filters)]
    return sorted(infos, key=lambda i: i.time, reverse=True)


def sweep_points(path: str | Path) -> list[dict]:
    """A sweep's points from `tables/points.csv`: {"point": id, "name": readable name, <each varying key>: value},
    keys in the grid's order; [] when the table is not there or not gb's."""
    try:
        rows = read_rows(SweepDir(path).points_table)
    except Exception:   # noqa: BLE001 (missing, a link or not gb's table: no points to name)
        return []
    if not {"point", "name"} <= set(rows.columns):
        return []
    declared = [k for k in _declared_axes(path) if k in rows.columns]   # the keys in the grid's order
    order = ["point", "name", *declared, *(c for c in rows.columns if c not in ("point", "name", *declared))]
    return [{k: r[k] for k in order} for r in rows.rows]


def _declared_axes(path: str | Path) -> dict[str, list]:
    """The `grid:` and `zip:` axes of a sweep's config, in the order it gives them."""
    cfg = SweepView(path).config() or {}
    sections = [given for s in ("grid", "zip") if isinstance(given := cfg.get(s), dict)]
    return {str(k): list(v) for given in sections for k, v in given.items() if isinstance(v, list) and len(v) > 1}


def grid_axes(path: str | Path) -> dict[str, list]:
    """The config keys that vary between a sweep's points, with their values: from `tables/points.csv`, else from
    the config's `grid:` and `zip:` (a sweep not yet aggregated)."""
    axes: dict[str, list] = {}
    for row in sweep_points(path):
        for k, v in row.items():
            if k not in ("point", "name") and v not in axes.setdefault(k, []):
                axes[k].append(v)
    return axes or _declared_axes(path)


def _point_named(sweep: Path, name: str) -> Path | None:
    if not (sweep / layout.POINTS).is_dir():
        return None
    if name and "/" not in name and is_dir(SweepDir(sweep).point(name).root):
        return SweepDir(sweep).point(name).root
    ids = [r["point"] for r in sweep_points(sweep) if str(r["name"]) == name]
    return SweepDir(sweep).point(str(ids[0])).root if len(ids) == 1 else None


def resolve(raw: str | Path, root: str | Path = "runs", key: str = "RUN") -> Path:
    """The run or sweep a person names: a path; else a path under `root`; else a `--name`; else a sweep's point,
    `SWEEP/NAME` (SWEEP a path or a name) or a NAME only one sweep under `root` has. GbError naming `key` when
    nothing, or more than one run, answers to it."""
    text = str(raw)
    path, root = Path(text), Path(root)
    if text == "":
        raise GbError(f"{key}: an empty path")
    if present(path) or path.is_absolute():
        return path
    if is_dir(root / path):
        return root / path
    runs = _labelled(root)
    named = [p for p in runs if read_labels(p).get("name") == text]
    if not named:   # SWEEP/POINT, the sweep by its path or name
        parts = text.split("/")
        for i in range(len(parts) - 1, 0, -1):
            head, tail = "/".join(parts[:i]), "/".join(parts[i:])
            sweeps = [p for p in (Path(head), root / head) if is_dir(p)] or \
                [p for p in runs if read_labels(p).get("name") == head]
            point = next((q for q in (_point_named(s, tail) for s in sweeps) if q is not None), None)
            if point is not None:
                return point
        named = [q for q in (_point_named(p, text) for p in runs if (p / layout.POINTS).is_dir()) if q is not None]
    if len(named) == 1:
        return named[0]
    where = shorten(str(root), 200)
    if named:
        raise GbError(f"{key}: {shorten(text, 100)} names {len(named)} runs under {where} "
                      f"({', '.join(shorten(str(p), 80) for p in named[:4])}); give the path")
    raise GbError(f"{key}: {shorten(text, 100)}: no such run directory, nor a run or sweep named so under {where} "
                  f"(`gb runs` lists them; a sweep's point: SWEEP/NAME)")


def _text(v: Any) -> str:
    return json.dumps(v) if isinstance(v, (list, dict)) else str(v)


def _same(got: str, want: str) -> bool:
    try:   # 10 == 10.0, 0.9 == .9
        return got == want or float(got) == float(want)
    except ValueError:
        return False


def _matches(info: RunInfo, filters: dict[str, str]) -> bool:
    fields = {"kind": info.kind, "status": info.status, **{k: _text(v) for k, v in info.config.items()}}
    return all(key in fields and _same(fields[key], want) for key, want in filters.items())


def show(path: str | Path) -> dict:
    """One run or sweep in full: what it is, its config, provenance and results; GbError for a foreign one."""
    path = Path(path)
    info = read_any(path)
    if info.kind == "foreign":
        raise GbError(f"{info.note} (foreign: not a run or sweep gb can show)")
    out: dict[str, Any] = {"path": str(path), "kind": info.kind, "status": info.status, "stages": info.stages,
                           "time": info.time, "numbers": info.numbers}
    out.update({k: v for k, v in (("note", info.note), ("labels", info.labels)) if v})
    view = RunView(path)
    marker = read_record(view.dir.marker)
    if info.kind == "run" and path.parent.name == layout.POINTS:   # a sweep's point: its sweep and readable name
        named = [r for r in sweep_points(path.parent.parent) if str(r["point"]) == path.name]
        if named:
            out["point_of"] = {"sweep": str(path.parent.parent), "name": named[0]["name"]}
    if info.kind == "run":
        out["config"] = view.any_config()
        gd = view.gd()
        out["provenance"] = {"gd": gd.get("provenance") if gd else None}
        results = {}
        for name, rec in view.programs().items():
            out["provenance"][name] = rec.get("provenance")
            # the headline numbers first: errors, then the inconsistency with the GD network (tables/)
            found = {**rec.fields, "status": rec.status, **{k: info.numbers[f"{name}.{k}"] for k in ("inconsistency",
                                      "expected_if_uncorrelated") if f"{name}.{k}" in info.numbers}}
            results[name] = {k: found.get(k) for k in (
                "status", "certified", "train_error", "val_error", "inconsistency", "expected_if_uncorrelated",
                "objective", "rel_gap", "min_margin", "solver", "solve_seconds", "cached_from") if k in found}
        if gd is not None:
            found = {**gd.fields, "status": gd.status}   # the status computed from the record, not its word
            results["gd"] = {k: found[k] for k in ("status", "train_error", "val_error", "train_loss", "steps",
                                                   "seconds", "normalized_margin") if k in found}
        out["results"] = results
    elif info.kind == "sweep":
        sweep = SweepView(path)
        out["config"] = sweep.config()
        out["points"] = sweep_points(path)   # id, readable name (what `gb runs show SWEEP/NAME` takes), the axes
        meta = sweep.record()
        out["provenance"] = {"sweep": meta.get("provenance") if meta else None}
    if marker is not None:
        out["created"] = marker.get("created")
        out["provenance"]["created"] = marker.get("provenance")
    return out


def diff(a: str | Path, b: str | Path) -> list[dict]:
    """What differs between two runs (or sweeps): rows of {"what": "config" | "stage" | "number", "key", "a", "b"}."""
    ia, ib = read_any(a), read_any(b)
    rows = []
    config_a, config_b = ({k: _text(v) for k, v in i.config.items() if k not in ("name", "output.dir")}
                          for i in (ia, ib))
    for what, da, db, shown in (("config", config_a, config_b, str), ("stage", ia.stages, ib.stages, str),
                                ("number", ia.numbers, ib.numbers, "{:.6g}".format)):
        for k in sorted(set(da) | set(db)):
            va, vb = da.get(k), db.get(k)
            if va != vb:
                rows.append({"what": what, "key": k, "a": "(absent)" if va is None else shown(va),
                             "b": "(absent)" if vb is None else shown(vb)})
    return rows


def headline(path: str | Path) -> str:
    """A figure's title: each program's inconsistency with the GD network and 2p(1-p) ("" before `gb compare`)."""
    numbers: dict[str, float] = {}
    inconsistency_into(Path(path), numbers)
    pairs = [f"{k.split('.')[0]} {v:.3f}" for k, v in numbers.items() if k.endswith(".inconsistency")]
    expected = [v for k, v in numbers.items() if k.endswith(".expected_if_uncorrelated")]
    return (f"inconsistency with GD: {', '.join(pairs)}" + (f" (2p(1-p) {expected[0]:.3f})" if expected else "")
            if pairs else "")
