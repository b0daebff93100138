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
- A run directory is untrusted input (it may have been received from someone else): before a
  writer takes its lock, the whole tree is walked without following links and any symlink in it
  is refused (gb writes, truncates and removes only its own files, never a link's target); the
  lock is opened with O_NOFOLLOW too, and removal never descends into a link.
- A run directory and a sweep directory know what they are: `gb-run.json` (`kind: run | sweep`)
  is written first, and each command refuses the other kind (a directory from before the marker
  is recognised by its contents: `points/` is a sweep, `gd/` or `svm/` a run).
- Refusals come before anything is created: when a writer's block refuses (GbError) and left
  nothing but the lock and the marker in a directory it created, both go, and so does the directory.

Stages written before manifests existed (no `manifest` key) are accepted as they are, so older
run and sweep directories stay usable.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import yaml

from gbcli.errors import GbError
from gbcli.io import clean_temp_files, load_yaml, read_text_untrusted, read_untrusted

PROBLEM_SECTIONS = ("dataset", "model", "contexts")
_HELD: dict[str, tuple[int, int]] = {}     # lock path -> (fd, depth) held by this process
MARKER = "gb-run.json"                   # what a directory is: {"kind": "run" | "sweep", ...}
KINDS = ("run", "sweep")
MARKER_MAX_BYTES = 65536


def _short(text: str, limit: int = 120) -> str:
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit // 2]}...{text[-limit // 2:]}"


# ------------------------------------------------------------------ untrusted trees


def check_tree(root: str | Path) -> None:
    """Refuse a run or sweep directory holding a symlink anywhere below it (gb would write, truncate
    or remove through it: a received `svm/` linked to another folder would have that folder's
    contents removed). The directory itself may be a link: the user named it. Walks without
    following links; a sweep of 600 points (~10,000 entries) takes ~0.1 s."""
    root = Path(root)
    if not root.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(root, onerror=None, followlinks=False):
        for name in (*dirnames, *filenames):
            p = Path(dirpath) / name
            try:
                mode = p.lstat().st_mode
            except OSError:
                continue
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                raise GbError(f"{_short(p, 200)}: not a regular file or folder (a FIFO, socket or device); gb "
                              f"writes only files and folders into a run directory (remove it)")
            if p.is_symlink():
                try:
                    target = os.readlink(p)
                except OSError:
                    target = "?"
                raise GbError(f"{_short(p, 200)}: is a symlink (to {_short(target)}); gb never writes or removes "
                              f"through a symlink inside a run directory (replace it by the file or folder itself)")


def remove_tree(path: Path) -> None:
    """Remove a file or folder of gb's; a symlink is removed itself, never followed (and shutil.rmtree
    on Linux works through directory descriptors, so a link that appears inside is not followed either)."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def dir_kind(path: str | Path, key: str = "--out") -> str | None:
    """What a directory is: "run", "sweep" or None (absent or empty of gb's files). The marker says
    it; a directory without one (made before markers existed) is recognised by its contents. A
    marker that is not gb's, or contents that contradict it (a sweep's `points/` beside a run's
    `gd/`), are refused with one line."""
    path = Path(path)
    if not path.is_dir():
        return None
    structural = {k for k, names in (("sweep", ("points",)), ("run", ("gd", "svm")))
                  if any((path / n).is_dir() for n in names)}
    if len(structural) > 1:
        raise GbError(f"{key}: {_short(path, 200)}: holds both a sweep's points/ and a run's gd/ or svm/ (a mixed "
                      f"directory: gb writes to neither; use another --out)")
    marker = path / MARKER
    kind = None
    if marker.is_symlink() or marker.exists():
        where = f"{_short(marker, 200)}"
        if marker.is_symlink() or not marker.is_file():
            raise GbError(f"{where}: not a regular file (gb's marker of what this directory is)")
        try:
            data = read_untrusted(marker, MARKER_MAX_BYTES)   # never through a link swapped in since the check
            rec = json.loads(data.decode("utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            raise GbError(f"{where}: unreadable or not gb's marker (expected a JSON object with kind run or sweep)") from None
        if not isinstance(rec, dict) or rec.get("kind") not in KINDS:
            got = rec.get("kind") if isinstance(rec, dict) else type(rec).__name__
            raise GbError(f"{where}: unknown directory kind {_short(repr(got))} (expected run or sweep)")
        kind = rec["kind"]
    if kind is not None and structural and kind not in structural:
        raise GbError(f"{key}: {_short(path, 200)}: its {MARKER} says {kind}, but it holds a "
                      f"{next(iter(structural))}'s files (a mixed directory; use another --out)")
    return kind or (next(iter(structural)) if structural else None)


def check_kind(path: str | Path, want: str, key: str = "--out", command: str = "") -> None:
    """Refuse a directory of the other kind: a run command on a sweep directory, a sweep on a run."""
    kind = dir_kind(path, key)
    if kind is not None and kind != want:
        other = {"run": "a run directory (of train-gd / fit-svm)", "sweep": "a sweep directory (of gb sweep)"}[kind]
        hint = "use another --out" + ("" if kind == "run" else "; a point of it is OUT/points/<id>")
        raise GbError(f"{key}: {_short(path, 200)} is {other}; {command or 'this command'} does not write into it ({hint})")


def write_marker(path: Path, kind: str) -> None:
    """The marker of a directory gb writes, written first (kept when present)."""
    marker = Path(path) / MARKER
    if marker.is_file() and not marker.is_symlink():
        return
    from gbcli.io import write_json   # leaf modules; imported here to keep this module's imports plain
    from gbcli.provenance import Clock

    write_json(marker, {"kind": kind, "format": 1,
                        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                        "provenance": Clock().stamp()})


# keys that say how a stage runs, never what it computes: left out of the manifests, so that
# setting them leaves a finished stage (and a checkpoint, gbcli.training.loop) valid
NOT_IN_MANIFEST = {"training": ("checkpoint_seconds",)}


def section_hash(cfg, sections: tuple[str, ...]) -> str:
    d = cfg.to_dict()
    picked = {s: d.get(s) for s in sections}
    for s, keys in NOT_IN_MANIFEST.items():
        if isinstance(picked.get(s), dict):
            picked[s] = {k: v for k, v in picked[s].items() if k not in keys}
    return hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()[:16]


def file_hash(path: Path) -> str:
    try:
        return hashlib.sha256(read_untrusted(path)).hexdigest()[:16]
    except (OSError, ValueError) as exc:
        raise GbError(f"{path}: unreadable ({exc.strerror if isinstance(exc, OSError) else 'not a regular file or too large'})") from None


def gd_manifest(cfg) -> dict:
    return {"problem": section_hash(cfg, PROBLEM_SECTIONS), "config": section_hash(cfg, PROBLEM_SECTIONS + ("training",))}


def svm_manifest(cfg, run_dir: Path, needs_trained: bool) -> dict:
    # how long a solve may take and where its arrays live do not change what it solves
    svm = {k: v for k, v in cfg.to_dict()["svm"].items() if k not in ("objectives", "time_limit", "device")}
    config = hashlib.sha256(json.dumps([section_hash(cfg, PROBLEM_SECTIONS), svm], sort_keys=True).encode()).hexdigest()[:16]
    upstream = file_hash(run_dir / "gd" / "summary.json") if needs_trained else None
    return {"problem": section_hash(cfg, PROBLEM_SECTIONS), "config": config, "upstream": upstream}


def _manifest(record_path: Path) -> dict | None:
    """The manifest of a stage record (None: no readable manifest, a stage from before manifests)."""
    try:
        rec = json.loads(read_untrusted(record_path))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    m = rec.get("manifest") if isinstance(rec, dict) else None
    return m if isinstance(m, dict) else None


def _problem_of(config_path: Path) -> dict | None:
    """The problem sections of a stage's saved config.yaml (None: unreadable; the tables say why)."""
    try:
        d = load_yaml(read_text_untrusted(config_path, 10_000_000))
    except (OSError, ValueError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return {s: d.get(s) for s in PROBLEM_SECTIONS} if isinstance(d, dict) else None


# ------------------------------------------------------------------ the lock


# Why not the `filelock` package: this lock is re-entrant across the stages a sweep point runs in
# one process, records the holder's pid for the refusal message, and must open its file with
# O_NOFOLLOW (a received `.gb.lock` that links elsewhere must not be truncated); fcntl.flock does
# all three in a few lines, and the kernel releases it when the process dies (kill -9 included).
@contextlib.contextmanager
def run_lock(run_dir: str | Path, key: str = "--out", name: str = ".gb.lock",
             busy: str = "another gb process (pid {pid}) is writing to this run directory",
             kind: str | None = "run"):
    """Exclusive lock on RUN_DIR/<name>; creates the directory (GbError when it cannot be written).
    `busy` is the message when another process holds it. Before anything is created: the tree is
    checked for symlinks and (with `kind`) for being a directory of that kind; then the marker is
    written. A GbError raised inside the block, in a directory this lock created and where nothing
    but the lock and the marker was written, removes them again (a refusal leaves nothing behind)."""
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
    check_tree(run_dir)
    if kind is not None:
        check_kind(run_dir, kind, key)
    created = [p for p in (run_dir, *run_dir.parents) if not os.path.lexists(p)]
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise GbError(f"{_short(path, 200)}: is a symlink; gb never writes through a symlink inside a run "
                          f"directory") from None
        raise GbError(f"{key}: {run_dir}: cannot write here ({exc.strerror or exc})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise GbError(f"{_short(path, 200)}: not a regular file (gb's lock file)")
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
        if kind is not None:
            write_marker(run_dir, kind)
        clean_temp_files(run_dir)   # temp files of a process killed mid-write
        yield
    except GbError:
        if created and {p.name for p in run_dir.iterdir()} <= {name, MARKER}:   # a refusal: leave nothing
            for leftover in (name, MARKER):
                (run_dir / leftover).unlink(missing_ok=True)
            for d in created:   # the run directory first, then the parents this lock created
                with contextlib.suppress(OSError):
                    d.rmdir()
        raise
    finally:
        del _HELD[path]
        os.close(fd)


# ------------------------------------------------------------------ before a stage writes


def _remove_stage(stage_dir: Path, record: str) -> None:
    """Remove a stage: its record first (it is then unfinished, never mixed), then the rest."""
    remove_tree(stage_dir / record)
    remove_tree(stage_dir)


def _remove_reports(run_dir: Path) -> None:
    remove_tree(run_dir / "tables" / "errors.csv")   # the record of `compare`
    for d in ("tables", "figures"):
        remove_tree(run_dir / d)


def _read_record(path: Path) -> dict | None:
    """A stage record as a dict (None: missing, unreadable or not a mapping)."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        rec = json.loads(read_untrusted(path))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return rec if isinstance(rec, dict) else None


def differing_keys(saved: dict | None, cfg, sections: tuple[str, ...]) -> str:
    """The dotted keys of `sections` whose values differ between a saved config.yaml and `cfg`
    ("model.kind: gln here, relu in the config"), for the messages of refusals."""
    from gbcli.io import flatten

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


def _saved_config(path: Path) -> dict | None:
    try:
        d = load_yaml(read_text_untrusted(path, 10_000_000))
    except (OSError, ValueError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return d if isinstance(d, dict) else None


def plan_gd(run_dir: Path, cfg) -> tuple[dict | None, list[str]]:
    """What a (re)training of `cfg` in `run_dir` meets, before anything is written: the finished GD
    record of this very config (the training would only repeat it), and the finished results it
    would remove (a network of another config; programs of another problem or that used the old
    network). Unfinished stages are not results: they are removed without asking."""
    run_dir = Path(run_dir)
    summary = run_dir / "gd" / "summary.json"
    rec = _read_record(summary)
    manifest = gd_manifest(cfg)
    if rec is not None and isinstance(rec.get("manifest"), dict) and rec["manifest"].get("config") == manifest["config"]:
        return rec, []
    lost = []
    if summary.exists() or summary.is_symlink():
        diff = differing_keys(_saved_config(run_dir / "gd" / "config.yaml"), cfg, PROBLEM_SECTIONS + ("training",))
        lost.append(f"gd/ (a network trained with another config{': ' + diff if diff else ''})")
    for record in sorted((run_dir / "svm").glob("*/result.json")):
        m = _manifest(record)
        if m is None or m.get("problem") != manifest["problem"] or m.get("upstream"):
            lost.append(f"svm/{record.parent.name}")
    return None, lost


def plan_svm(run_dir: Path, cfg, objective: str, needs_trained: bool) -> tuple[dict | None, str | None]:
    """What solving `objective` in `run_dir` meets: its finished record when it was solved from this
    very config and network (solving again would only repeat it), else what would be lost (a finished
    result of other svm options; None when there is none, or when it is stale: its network was
    retrained since, so it is no result any more)."""
    record = Path(run_dir) / "svm" / objective / "result.json"
    if not (record.exists() or record.is_symlink()):
        return None, None
    rec = _read_record(record)
    m = rec.get("manifest") if rec is not None else None
    if isinstance(m, dict):
        mine = svm_manifest(cfg, Path(run_dir), needs_trained)
        if m.get("upstream") and m.get("upstream") != mine["upstream"]:
            return None, None    # stale: its network is gone
        if m.get("config") == mine["config"] and m.get("upstream") == mine["upstream"]:
            if rec.get("time_limited") is True and rec.get("status") != "optimal":
                return None, None   # stopped by svm.time_limit: solving again resumes it (a forged flag costs a solve)
            return rec, None
    diff = differing_keys(_saved_config(record.parent / "config.yaml"), cfg, ("svm",))
    return None, f"svm/{objective} (solved with other svm options{': ' + diff if diff else ''})"


def begin_gd(run_dir: Path, cfg) -> None:
    """Before a (re)training writes anything: the old GD stage becomes unfinished, the programs that
    used the old network or another problem are removed, and so are the reports."""
    run_dir = Path(run_dir)
    remove_tree(run_dir / "gd" / "summary.json")
    problem = gd_manifest(cfg)["problem"]
    for record in sorted((run_dir / "svm").glob("*/result.json")):
        m = _manifest(record)
        if m is None or m.get("problem") != problem or m.get("upstream"):
            _remove_stage(record.parent, "result.json")
    for stage in sorted((run_dir / "svm").glob("*")):
        if stage.is_dir() and not (stage / "result.json").exists():   # unfinished programs
            remove_tree(stage)
    _remove_reports(run_dir)


def begin_svm(run_dir: Path, objective: str) -> None:
    """Before a program is (re)solved: its old result becomes unfinished and the reports go."""
    run_dir = Path(run_dir)
    remove_tree(run_dir / "svm" / objective / "result.json")
    _remove_reports(run_dir)


# ------------------------------------------------------------------ checks


def check_same_problem(run_dir: Path, cfg) -> None:
    """fit-svm: the run directory's existing stages come from this config's problem."""
    run_dir = Path(run_dir)
    problem = gd_manifest(cfg)["problem"]
    for record in [run_dir / "gd" / "summary.json", *sorted((run_dir / "svm").glob("*/result.json"))]:
        m = _manifest(record) if record.is_file() else None
        if m is not None and m.get("problem") != problem:
            diff = differing_keys(_saved_config(record.parent / "config.yaml"), cfg, PROBLEM_SECTIONS)
            raise GbError(f"{record}: computed from another dataset, model or contexts than this config"
                          f"{' (' + diff + ')' if diff else ''}; use another --out, or rerun `gb train-gd` with "
                          f"this config and --force")


def check_trained(run_dir: Path, cfg, needed_by: str) -> Path:
    """A program that uses the trained network: the GD stage is finished, healthy and of this problem."""
    summary = Path(run_dir) / "gd" / "summary.json"
    if not summary.is_file():
        raise GbError(f"{summary.parent / 'model.pt'}: {needed_by} need the trained {cfg.model.predictor} of "
                      f"this run (run `gb train-gd` first)")
    try:
        rec = json.loads(read_untrusted(summary))
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
