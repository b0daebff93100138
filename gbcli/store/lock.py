"""What a directory is and who writes it: the kind marker (`gb-run.json`, `kind: run | sweep`, written
first) and the per-directory lock (`.gb.lock`; re-entrant within a process, released by the kernel
when the process dies). A refusal inside the block, in a directory the lock created, leaves nothing."""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import os
from pathlib import Path

from gbcli.errors import GbError
from gbcli.fs import layout
from gbcli.fs.safe import check_tree, clean_temp_files, is_dir, is_file, open_lock, present, read_untrusted, write_json
from gbcli.provenance import Clock
from gbcli.text import shorten

_HELD: set[str] = set()                  # the lock paths this process holds
MARKER = layout.MARKER                   # what a directory is: {"kind": "run" | "sweep", ...}
MARKER_MAX_BYTES = 65536


def dir_kind(path: str | Path, key: str = "--out") -> str | None:
    """"run", "sweep" or None (absent or empty of gb's files): its marker's word, else its contents. A
    marker that is not gb's, or contents that contradict it, are refused with one line."""
    path = Path(path)
    if not path.is_dir():
        return None
    structural = {k for k, names in (("sweep", (layout.POINTS,)), ("run", (layout.GD, layout.SVM)))
                  if any((path / n).is_dir() for n in names)}
    if len(structural) > 1:
        raise GbError(f"{key}: {shorten(path, 200)}: holds both a sweep's points/ and a run's gd/ or svm/ (a mixed "
                      f"directory: gb writes to neither; use another --out)")
    marker = path / MARKER
    if not present(marker):
        return next(iter(structural), None)
    where = shorten(marker, 200)
    if not is_file(marker):
        raise GbError(f"{where}: not a regular file (gb's marker of what this directory is)")
    try:
        rec = json.loads(read_untrusted(marker, MARKER_MAX_BYTES).decode("utf-8"))   # no link swapped in since
    except (OSError, ValueError, UnicodeDecodeError):
        raise GbError(f"{where}: unreadable or not gb's marker (expected a JSON object with kind run or sweep); if a "
                      f"crash cut it short, remove it (`rm {shorten(marker, 200)}`) and run the command again: gb "
                      f"knows its run and sweep folders by their contents") from None
    if not isinstance(rec, dict) or rec.get("kind") not in ("run", "sweep"):
        got = rec.get("kind") if isinstance(rec, dict) else type(rec).__name__
        raise GbError(f"{where}: unknown directory kind {shorten(repr(got), 120)} (expected run or sweep)")
    if structural and rec["kind"] not in structural:
        raise GbError(f"{key}: {shorten(path, 200)}: its {MARKER} says {rec['kind']}, but it holds a "
                      f"{next(iter(structural))}'s files (a mixed directory; use another --out)")
    return rec["kind"]


def check_kind(path: str | Path, want: str, key: str = "--out", command: str = "") -> str | None:
    """Refuse a directory of the other kind: a run command on a sweep directory, a sweep on a run; its kind."""
    if (kind := dir_kind(path, key)) is not None and kind != want:
        other = {"run": "a run directory (of train-gd / fit-svm)", "sweep": "a sweep directory (of gb sweep)"}[kind]
        hint = "use another --out" + ("" if kind == "run" else "; a point of it is OUT/points/<id>")
        raise GbError(f"{key}: {shorten(path, 200)} is {other}; {command or 'this command'} does not write into it "
                      f"({hint})")
    return kind


def check_run_target(path: str | Path, command: str, kind: str | None = "run", key: str = "--out") -> None:
    """What refuses a command writing a directory, before any work (cheap, no torch): a link anywhere
    in it, and with `kind` a directory of the other kind or a folder gb did not make (the write rule:
    gb writes, replaces and removes only inside a folder it made or an empty one)."""
    check_tree(path)
    if kind is not None and check_kind(path, kind, key, command) is None and is_dir(path) \
            and not present(Path(path) / MARKER) and any(True for _ in Path(path).iterdir()):
        raise GbError(f"{key}: {shorten(path, 200)}: not a folder gb made (no {MARKER}) and not empty; gb writes "
                      f"only into a folder it made or an empty one (use another --out)")


def write_marker(path: Path, kind: str) -> None:
    """The marker of a directory gb writes, written first (kept when present)."""
    marker = Path(path) / MARKER
    if is_file(marker):
        return
    write_json(marker, {"kind": kind, "format": 1,
                        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                        "provenance": Clock().stamp()})


# Not `filelock`: this lock is re-entrant, records the holder's pid and opens its file with no link.
@contextlib.contextmanager
def run_lock(run_dir: str | Path, key: str = "--out", name: str = layout.LOCK,
             busy: str = "another gb process (pid {pid}) is writing to this run directory",
             kind: str | None = "run"):
    """Exclusive lock on RUN_DIR/<name>, after `check_run_target`; creates the directory and (with
    `kind`) the marker. `busy`: the message when another process holds it. A GbError inside the
    block, where only the lock and marker were written in a directory it created, removes them."""
    run_dir = Path(run_dir)
    path = str((run_dir / name).absolute())
    if path in _HELD:   # re-entrant: this process holds it already
        yield
        return
    check_run_target(run_dir, "", kind, key)
    created = [p for p in (run_dir, *run_dir.parents) if not present(p)]
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = open_lock(path)
    except OSError as exc:
        raise GbError(f"{key}: {run_dir}: cannot write here ({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.pread(fd, 64, 0).decode(errors="replace").strip()
        other = other if other.isdecimal() else "not recorded" if not other else "unknown"   # never the file's text as is
        os.close(fd)
        raise GbError(f"{run_dir}: {busy.format(pid=other)}; wait for it or use another --out") from None
    try:   # the holder's pid, for the message above
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    except OSError as exc:   # a full disk: one line naming the lock file, not a bare errno
        os.close(fd)
        raise OSError(exc.errno, exc.strerror or str(exc), str(run_dir / name)) from None
    _HELD.add(path)
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
        _HELD.discard(path)
        os.close(fd)


