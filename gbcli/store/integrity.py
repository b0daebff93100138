"""Run-directory integrity: no stale or mixed results. A rerun removes a stage's record first (the
stage is then unfinished), then what depended on it, then writes, so a kill at any moment leaves
consistent finished stages. A record without a manifest (`identity`) is stale, never trusted."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from gbcli.config.loading import read_stored_config, validate
from gbcli.errors import GbError
from gbcli.fs import layout
from gbcli.store.identity import GD_SECTIONS, PROBLEM_SECTIONS, file_hash, gd_manifest, section_hash, svm_manifest
from gbcli.fs.layout import RunDir
from gbcli.store.lock import write_marker
from gbcli.store.records import GdStatus, Record, is_result, resumable
from gbcli.fs.safe import (_short, flatten, is_file, open_fd, present, read_csv_untrusted, read_json, read_record,
                           read_untrusted, remove)


def manifest_of(record_path: Path) -> dict | None:
    rec = Record.read(record_path)
    return rec.manifest if rec is not None else None


# ------------------------------------------------------------------ before a stage writes


def remove_reports(run_dir: Path) -> None:
    run = RunDir(run_dir)
    for path in (run.errors, run.tables, run.figures):   # the record of `compare` first
        remove(path)


def differing_keys(saved: dict | None, cfg, sections: tuple[str, ...]) -> str:
    """The dotted keys of `sections` that differ between a saved config.yaml and `cfg`, for refusals."""
    if not isinstance(saved, dict):
        return ""
    now = cfg.to_dict()
    a = flatten({s: saved.get(s) if isinstance(saved.get(s), dict) else {} for s in sections})
    b = flatten({s: now.get(s) or {} for s in sections})
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
    keys.sort(key=lambda k: (not k.endswith((".kind", ".name")), k))   # the kind first: it explains the rest
    shown = [f"{k}: {_short(repr(a.get(k)), 40)} there, {_short(repr(b.get(k)), 40)} in the config" for k in keys[:3]]
    more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
    return "; ".join(shown) + more


def _check_saved_config(path: Path, record: Path, manifest: dict, key: str, sections: tuple[str, ...]) -> None:
    """A stage's config.yaml must be the one its manifest hashes (else it labels the numbers wrongly)."""
    saved = read_stored_config(path)
    try:
        got = section_hash(validate(saved, str(path)), sections) if saved is not None else None
    except GbError as exc:
        raise GbError(f"{path}: not a gb config ({_short(str(exc), 200)}); rerun the stage") from None
    if got is None or got != manifest.get(key):
        raise GbError(f"{path}: not the config {record} was computed from (edited, replaced or missing); rerun "
                      f"the stage")


def _outdated(run: RunDir, problem: str) -> list[Path]:
    return [r for r in run.results()
            if (m := manifest_of(r)) is None or m.get("problem") != problem or m.get("upstream")]


def plan_gd(run_dir: Path, cfg) -> tuple[dict | None, list[str]]:
    """What a (re)training of `cfg` meets: the finished GD record of this very config (nothing to
    do), and the finished results it would remove (unfinished stages go without asking)."""
    run = RunDir(run_dir)
    rec = Record.read(run.summary)
    manifest = gd_manifest(cfg)
    if rec is not None and rec.manifest is not None and rec.manifest.get("config") == manifest["config"]:
        return rec.fields, []
    lost = []
    if present(run.summary):
        saved = read_stored_config(run.gd_config)
        diff = differing_keys(saved, cfg, GD_SECTIONS) if saved is not None else \
            f"its {layout.CONFIG} is unreadable or not gb's, e.g. YAML aliases"
        lost.append(f"gd/ (a network trained with another config{': ' + diff if diff else ''})")
    return None, lost + [f"svm/{record.parent.name}" for record in _outdated(run, manifest["problem"])]


def plan_svm(run_dir: Path, cfg, objective: str, needs_trained: bool) -> tuple[dict | None, str | None]:
    """What solving `objective` meets: its finished record of this very config and network, else
    what would be lost (a result of other svm options; None when none or stale)."""
    run = RunDir(run_dir)
    record = run.result(objective)
    if not present(record):
        return None, None
    if (rec := Record.read(record)) is not None and (m := rec.manifest) is not None:
        mine = svm_manifest(cfg, run.root, needs_trained)
        if m.get("upstream") and m.get("upstream") != mine["upstream"]:
            return None, None    # stale: its network is gone
        if m.get("config") == mine["config"] and m.get("upstream") == mine["upstream"]:
            return (None, None) if resumable(rec.fields) else (rec.fields, None)
    diff = differing_keys(read_stored_config(run.program_config(objective)), cfg, ("svm",))
    return None, f"svm/{objective} (solved with other svm options{': ' + diff if diff else ''})"


def begin_gd(run_dir: Path, cfg) -> None:
    """Before a (re)training writes: the GD stage becomes unfinished; outdated programs and reports go."""
    run = RunDir(run_dir)
    remove(run.summary)
    for record in _outdated(run, gd_manifest(cfg)["problem"]):
        remove(record)   # its record first: the stage is then unfinished, never mixed
        remove(record.parent)
    for stage in sorted(run.svm.glob("*")):
        if stage.is_dir() and not present(stage / layout.RESULT):   # unfinished programs
            remove(stage)
    remove_reports(run.root)


def begin_svm(run_dir: Path, objective: str) -> None:
    remove(RunDir(run_dir).result(objective))   # the old result is unfinished, then the reports go
    remove_reports(run_dir)


# ------------------------------------------------------------------ checks


def check_same_problem(run_dir: Path, cfg) -> None:
    """fit-svm: the run directory's existing stages come from this config's problem."""
    run = RunDir(run_dir)
    problem = gd_manifest(cfg)["problem"]
    for record in filter(present, [run.summary, *run.results()]):
        if (m := manifest_of(record)) is None:
            raise GbError(f"{record}: not a finished stage of this gb (unreadable, or no manifest); use another "
                          f"--out, or rerun `gb train-gd` with this config and --force")
        if m.get("problem") != problem:
            diff = differing_keys(read_stored_config(record.parent / layout.CONFIG), cfg, PROBLEM_SECTIONS)
            raise GbError(f"{record}: computed from another dataset, model or contexts than this config"
                          f"{' (' + diff + ')' if diff else ''}; use another --out, or rerun `gb train-gd` with "
                          f"this config and --force")


def check_trained(run_dir: Path, cfg, needed_by: str) -> Path:
    """A program that uses the trained network: the GD stage is finished, healthy and of this problem."""
    run = RunDir(run_dir)
    if not is_file(summary := run.summary):
        raise GbError(f"{run.model}: {needed_by} need the trained {cfg.model.predictor} of "
                      f"this run (run `gb train-gd` first)")
    try:
        rec = read_json(summary)
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        raise GbError(f"{summary}: unreadable or corrupt; rerun `gb train-gd`") from None
    if not isinstance(rec, dict):
        raise GbError(f"{summary}: not a gb stage record; rerun `gb train-gd`")
    if not is_result(rec.get("status", GdStatus.OK), gd=True):
        raise GbError(f"{summary}: the training {rec.get('status')} ({rec.get('message', '')}); {needed_by} "
                      f"need a trained network")
    return summary


def check_run(run_dir: Path) -> None:
    """compare: no interrupted stage; every program of the GD stage's problem (and network, if used)."""
    run = RunDir(run_dir)
    summary = run.summary
    stages = [(run.gd, summary, "gb train-gd")] + \
        [(s, s / layout.RESULT, f"gb fit-svm --objective {s.name}") for s in sorted(run.svm.glob("*"))]
    for stage, record, rerun in stages:   # files but no record (a record is written last)
        if stage.is_dir() and any(not p.name.startswith(".") for p in stage.iterdir()) and not present(record):
            raise GbError(f"{stage}: unfinished stage (interrupted, failed or still running); rerun `{rerun}`")
    gm = manifest_of(summary) if is_file(summary) else None
    if is_file(summary) and gm is None:
        raise GbError(f"{summary}: not a finished stage of this gb (no manifest); rerun `gb train-gd`")
    if gm is not None:
        _check_saved_config(run.gd_config, summary, gm, "config", GD_SECTIONS)
    for record in run.results():
        if (m := manifest_of(record)) is None:
            raise GbError(f"{record}: not a finished stage of this gb (no manifest); rerun `gb fit-svm`")
        _check_saved_config(record.parent / layout.CONFIG, record, m, "problem", PROBLEM_SECTIONS)
        if gm is not None and m.get("problem") != gm.get("problem"):
            raise GbError(f"{record}: stale: computed from another dataset, model or contexts than {summary} "
                          f"(rerun `gb fit-svm`)")
        if m.get("upstream"):
            if not is_file(summary):
                raise GbError(f"{record}: its trained network ({summary}) is missing (rerun `gb train-gd` "
                              f"and `gb fit-svm`)")
            if file_hash(summary) != m["upstream"]:
                raise GbError(f"{record}: stale: the network it used was retrained since (rerun `gb fit-svm`)")


# ------------------------------------------------------------------ after a crash


def _torn(path: Path) -> bool:
    """Whether a file of a finished stage is not whole: missing, a link, unreadable, or not what gb
    writes there (a table without its last line break, an archive whose members fail their CRC: a
    crash or a power loss cut it)."""
    if not is_file(path):
        return True
    if path.suffix == ".json":
        return read_record(path) is None
    if path.suffix == ".yaml":
        return read_stored_config(path) is None
    try:
        if path.suffix == ".csv":
            read_csv_untrusted(path)   # pandas raises parser, value, unicode and OS errors
            return not read_untrusted(path).endswith(b"\n")
        if path.suffix in (".npz", ".pt"):   # zip archives (torch.save writes one): every member's CRC
            with os.fdopen(open_fd(path, os.O_RDONLY), "rb") as fh, zipfile.ZipFile(fh) as archive:
                return archive.testzip() is not None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, NotImplementedError):
        return True
    return False


def heal_point(run_dir: Path, stages: bool = True) -> list[Path]:
    """Undo what a crash tore in a sweep point's folder (gb's own) so the point redoes it; returns the
    torn files. A torn marker is rewritten; a finished stage with a torn file loses its record (it
    reruns); torn tables or failure record go. `stages` False: the marker only (a done point)."""
    run = RunDir(run_dir)
    torn: list[Path] = []
    if present(run.marker):
        rec = read_record(run.marker)
        if rec is None or rec.get("kind") != "run":
            torn.append(run.marker)
            remove(run.marker)
            write_marker(run.root, "run")
    if not stages:
        return torn
    # each finished stage: its record (written last), its files (config first), its optional files, manifest key
    finished = [(run.summary, [run.gd_config, run.model], [run.metrics, run.gd_predictions], "config", GD_SECTIONS)] \
        if present(run.summary) else []
    program_files = (layout.COMPACT, layout.PREDICTIONS, layout.THETA)
    finished += [(r, [r.parent / layout.CONFIG], [r.parent / n for n in program_files], "problem", PROBLEM_SECTIONS)
                 for r in run.results()]
    for record, files, optional, key, sections in finished:
        bad = next((p for p in (record, *files, *filter(present, optional)) if _torn(p)), None)
        try:   # a whole config that is not the one its manifest hashes (cut at a line break) is torn too
            if bad is None:
                _check_saved_config(files[0], record, manifest_of(record) or {}, key, sections)
        except GbError:
            bad = files[0]
        if bad is not None:
            torn.append(bad)
            remove(record)   # the stage is unfinished: redone, and its files rewritten
    for table in (run.errors, run.inconsistency, run.failed):
        if present(table) and _torn(table):
            torn.append(table)
            remove(table)
    return torn
