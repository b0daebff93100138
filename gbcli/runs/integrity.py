"""Run-directory integrity: what each stage was computed from, one writer at a time, and no stale
or mixed results.

- A manifest in every stage's record (`gd/summary.json`, `svm/<objective>/result.json`): a hash of
  the config sections the stage depends on (`problem`: dataset, model and contexts, which every
  stage of a run shares; `config`: those plus the stage's own section) and, for a program that
  uses the trained network, a hash of the `gd/summary.json` it used (`upstream`).
- `fit-svm` refuses a run directory whose GD stage (or earlier programs) came from another
  problem, and a program whose trained network is missing, unfinished or diverged; `compare`
  refuses a stage whose upstream changed or is missing, and an interrupted stage.
- Rerunning a stage first removes its record (so it counts as unfinished until the new one is
  complete), then everything that depended on it, then writes; a process killed at any moment
  leaves a directory whose finished stages are consistent, and the next run cleans the temp files.
- A per-directory lock (`.gb.lock`, released by the kernel when the process dies) refuses a
  second writer. It is re-entrant within a process (a sweep point runs all stages under one).

Stages written before manifests existed (no `manifest` key) are accepted as they are, so older
run and sweep directories stay usable.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from pathlib import Path

import yaml

from gbcli.errors import GbError
from gbcli.io import clean_temp_files, load_yaml

PROBLEM_SECTIONS = ("dataset", "model", "contexts")
_HELD: dict[str, tuple[int, int]] = {}     # lock path -> (fd, depth) held by this process


def section_hash(cfg, sections: tuple[str, ...]) -> str:
    d = cfg.to_dict()
    return hashlib.sha256(json.dumps({s: d.get(s) for s in sections}, sort_keys=True).encode()).hexdigest()[:16]


def file_hash(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def gd_manifest(cfg) -> dict:
    return {"problem": section_hash(cfg, PROBLEM_SECTIONS), "config": section_hash(cfg, PROBLEM_SECTIONS + ("training",))}


def svm_manifest(cfg, run_dir: Path, needs_trained: bool) -> dict:
    svm = {k: v for k, v in cfg.to_dict()["svm"].items() if k != "objectives"}
    config = hashlib.sha256(json.dumps([section_hash(cfg, PROBLEM_SECTIONS), svm], sort_keys=True).encode()).hexdigest()[:16]
    upstream = file_hash(run_dir / "gd" / "summary.json") if needs_trained else None
    return {"problem": section_hash(cfg, PROBLEM_SECTIONS), "config": config, "upstream": upstream}


def _manifest(record_path: Path) -> dict | None:
    """The manifest of a stage record (None: no readable manifest, a stage from before manifests)."""
    try:
        rec = json.loads(record_path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    m = rec.get("manifest") if isinstance(rec, dict) else None
    return m if isinstance(m, dict) else None


def _problem_of(config_path: Path) -> dict | None:
    """The problem sections of a stage's saved config.yaml (None: unreadable; the tables say why)."""
    try:
        d = load_yaml(config_path.read_text())
    except (OSError, ValueError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return {s: d.get(s) for s in PROBLEM_SECTIONS} if isinstance(d, dict) else None


# ------------------------------------------------------------------ the lock


@contextlib.contextmanager
def run_lock(run_dir: str | Path, key: str = "--out", name: str = ".gb.lock",
             busy: str = "another gb process (pid {pid}) is writing to this run directory"):
    """Exclusive lock on RUN_DIR/<name>; creates the directory (GbError when it cannot be written).
    `busy` is the message when another process holds it."""
    run_dir = Path(run_dir)
    path = str((run_dir / name).absolute())
    if path in _HELD:   # re-entrant: this process holds it already
        fd, depth = _HELD[path]
        _HELD[path] = (fd, depth + 1)
        try:
            yield
        finally:
            fd, depth = _HELD[path]
            _HELD[path] = (fd, depth - 1)
        return
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise GbError(f"{key}: {run_dir}: cannot write here ({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.pread(fd, 64, 0).decode(errors="replace").strip() or "not yet recorded"
        os.close(fd)
        raise GbError(f"{run_dir}: {busy.format(pid=other)}; wait for it or use another --out") from None
    try:   # the holder's pid, for the message above
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    except OSError as exc:   # a full disk: one line naming the lock file, not a bare errno
        os.close(fd)
        raise OSError(exc.errno, exc.strerror or str(exc), str(run_dir / name)) from None
    _HELD[path] = (fd, 1)
    try:
        clean_temp_files(run_dir)   # temp files of a process killed mid-write
        yield
    finally:
        del _HELD[path]
        os.close(fd)


# ------------------------------------------------------------------ before a stage writes


def _remove_stage(stage_dir: Path, record: str) -> None:
    """Remove a stage: its record first (it is then unfinished, never mixed), then the rest."""
    (stage_dir / record).unlink(missing_ok=True)
    shutil.rmtree(stage_dir, ignore_errors=True)


def _remove_reports(run_dir: Path) -> None:
    (run_dir / "tables" / "errors.csv").unlink(missing_ok=True)   # the record of `compare`
    for d in ("tables", "figures"):
        shutil.rmtree(run_dir / d, ignore_errors=True)


def begin_gd(run_dir: Path, cfg) -> None:
    """Before a (re)training writes anything: the old GD stage becomes unfinished, the programs that
    used the old network or another problem are removed, and so are the reports."""
    run_dir = Path(run_dir)
    (run_dir / "gd" / "summary.json").unlink(missing_ok=True)
    problem = gd_manifest(cfg)["problem"]
    for record in sorted((run_dir / "svm").glob("*/result.json")):
        m = _manifest(record)
        if m is None or m.get("problem") != problem or m.get("upstream"):
            _remove_stage(record.parent, "result.json")
    for stage in sorted((run_dir / "svm").glob("*")):
        if stage.is_dir() and not (stage / "result.json").exists():   # unfinished programs
            shutil.rmtree(stage, ignore_errors=True)
    _remove_reports(run_dir)


def begin_svm(run_dir: Path, objective: str) -> None:
    """Before a program is (re)solved: its old result becomes unfinished and the reports go."""
    run_dir = Path(run_dir)
    (run_dir / "svm" / objective / "result.json").unlink(missing_ok=True)
    _remove_reports(run_dir)


# ------------------------------------------------------------------ checks


def check_same_problem(run_dir: Path, cfg) -> None:
    """fit-svm: the run directory's existing stages come from this config's problem."""
    run_dir = Path(run_dir)
    problem = gd_manifest(cfg)["problem"]
    for record in [run_dir / "gd" / "summary.json", *sorted((run_dir / "svm").glob("*/result.json"))]:
        m = _manifest(record) if record.is_file() else None
        if m is not None and m.get("problem") != problem:
            raise GbError(f"{record}: computed from another dataset, model or contexts than this config "
                          f"(rerun `gb train-gd` with this config, or use another --out)")


def check_trained(run_dir: Path, cfg, needed_by: str) -> Path:
    """A program that uses the trained network: the GD stage is finished, healthy and of this problem."""
    summary = Path(run_dir) / "gd" / "summary.json"
    if not summary.is_file():
        raise GbError(f"{summary.parent / 'model.pt'}: {needed_by} need the trained {cfg.model.predictor} of "
                      f"this run (run `gb train-gd` first)")
    try:
        rec = json.loads(summary.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        raise GbError(f"{summary}: unreadable or corrupt; rerun `gb train-gd`") from None
    if not isinstance(rec, dict):
        raise GbError(f"{summary}: not a gb stage record; rerun `gb train-gd`")
    if rec.get("status", "ok") != "ok":
        raise GbError(f"{summary}: the training {rec.get('status')} ({rec.get('message', '')}); {needed_by} "
                      f"need a trained network")
    return summary


def check_run(run_dir: Path) -> None:
    """compare: no interrupted stage, and every program's manifest matches the GD stage it is paired
    with (same problem; for programs that used the network, the same network)."""
    run_dir = Path(run_dir)
    gd = run_dir / "gd"
    if gd.is_dir() and any(p.name != "summary.json" and not p.name.startswith(".") for p in gd.iterdir()) \
            and not (gd / "summary.json").exists():
        raise GbError(f"{gd}: unfinished stage (interrupted, failed or still running); rerun `gb train-gd`")
    for stage in sorted((run_dir / "svm").glob("*")):
        if stage.is_dir() and any(not p.name.startswith(".") for p in stage.iterdir()) \
                and not (stage / "result.json").exists():
            raise GbError(f"{stage}: unfinished stage (interrupted, failed or still running); rerun "
                          f"`gb fit-svm --objective {stage.name}`")
    gm = _manifest(gd / "summary.json") if (gd / "summary.json").is_file() else None
    gp = _problem_of(gd / "config.yaml") if (gd / "summary.json").is_file() else None
    for record in sorted((run_dir / "svm").glob("*/result.json")):
        m = _manifest(record)
        p = _problem_of(record.parent / "config.yaml")
        if (m is None or gm is None) and gp is not None and p is not None and p != gp:   # stages without a manifest
            raise GbError(f"{record}: stale: its config.yaml has another dataset, model or contexts than "
                          f"{gd / 'config.yaml'} (rerun `gb fit-svm`)")
        if m is None:
            continue
        if gm is not None and m.get("problem") != gm.get("problem"):
            raise GbError(f"{record}: stale: computed from another dataset, model or contexts than {gd / 'summary.json'} "
                          f"(rerun `gb fit-svm`)")
        if m.get("upstream"):
            if not (gd / "summary.json").is_file():
                raise GbError(f"{record}: its trained network ({gd / 'summary.json'}) is missing (rerun `gb train-gd` "
                              f"and `gb fit-svm`)")
            if file_hash(gd / "summary.json") != m["upstream"]:
                raise GbError(f"{record}: stale: the network it used was retrained since (rerun `gb fit-svm`)")
