"""The safe file layer of run and sweep directories: the ONE place that checks links. Writes are
atomic (temp file, then rename) with the umask's mode. What gb reads from a run directory is
untrusted: never through a symlink, only a regular file, size-bounded, never unpickled. Appends,
locks and removals never follow a link; `check_tree` refuses a tree holding one where gb owns it."""

from __future__ import annotations

import contextlib
import contextvars
import errno
import io
import json
import os
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from gbcli.errors import GbError
from gbcli.fs.layout import FOREIGN


# Writes held back by `staged_writes` (None outside one): absolute path -> bytes, in write order.
_STAGE: contextvars.ContextVar[dict[str, bytes] | None] = contextvars.ContextVar("gb_staged_writes", default=None)


@contextlib.contextmanager
def staged_writes(landing=contextlib.nullcontext):
    """Hold the block's `atomic_write_*` in memory; land them in order inside `landing()` (e.g. the
    lock) only when the block ends without an exception. Reads see held files; nested blocks land
    with the outermost."""
    if _STAGE.get() is not None:
        yield
        return
    stage: dict[str, bytes] = {}
    token = _STAGE.set(stage)
    try:
        yield
    finally:
        _STAGE.reset(token)
    with landing():
        for path in stage:   # a folder where a file goes: refused before the first file lands
            if os.path.isdir(path) and not os.path.islink(path):
                raise GbError(f"{path}: a folder where gb writes this file (move it away); nothing was written")
        for path, data in stage.items():
            atomic_write_bytes(path, data)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` atomically (temp file, fsync, rename, fsync of the folder; both fsyncs so
    a power loss leaves no renamed file of zeros); held back inside `staged_writes`."""
    stage = _STAGE.get()
    if stage is not None:
        key = os.path.abspath(path)
        stage.pop(key, None)   # a file written twice lands once, in its last place of the order
        stage[key] = bytes(data)
        return
    path, tmp = Path(path), None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        mask = os.umask(0o022)   # reading the umask means setting it: set straight back
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)   # mkstemp creates 0600; results are for colleagues too
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_folder(path.parent)
    except BaseException as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):   # a full disk: say which file could not be written
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
        raise


def fsync_folder(folder: str | Path) -> None:
    """Flush a folder's entries to disk (skipped where the file system cannot: EINVAL, EBADF...)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EBADF, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


MAX_DEPTH = 64   # folder levels below a run or sweep directory: gb makes at most 5 (shutil.rmtree recurses)


def entries_below(directory: str | Path, foreign: frozenset[str] = frozenset()):
    """(path, lstat mode) below `directory` but its top-level `foreign` folders; links not followed."""
    root = Path(directory)
    stack = [(root, 0)] if root.is_dir() else []
    while stack:
        d, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise GbError(f"{_short(d, 200)}: folders more than {MAX_DEPTH} deep below {_short(root, 120)}; gb never "
                          f"makes such a tree (a received or damaged directory: remove that folder)")
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for entry in entries:
            if d == root and entry.name in foreign:
                continue
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                stack.append((Path(entry.path), depth + 1))
            yield Path(entry.path), mode


def files_below(directory: str | Path):
    return (p for p, mode in entries_below(directory) if stat.S_ISREG(mode))


def clean_temp_files(directory: str | Path) -> None:
    """Remove the temporary files (`.*.tmp`) that a process killed mid-write left below `directory`."""
    for path in files_below(directory):
        if path.name.startswith(".") and path.name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                os.unlink(path)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


MAX_READ_BYTES = 1024 ** 3   # larger than any file gb writes into a run directory


def read_untrusted(path: str | Path, limit: int = MAX_READ_BYTES) -> bytes:
    """The bytes of an untrusted file: never through a symlink, only a regular file (opened
    non-blocking: a FIFO cannot hang the reader), at most `limit` bytes; OSError or ValueError else."""
    data = (_STAGE.get() or {}).get(os.path.abspath(path))   # written earlier in a `staged_writes` block
    if data is None:
        fd = open_fd(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(f"{path}: not a regular file")
            if st.st_size > limit:
                raise ValueError(f"{path}: {st.st_size} bytes, more than the {limit} gb reads")
            data = bytearray()
            while len(data) <= limit and (chunk := os.read(fd, 1 << 20)):   # it may grow since fstat
                data += chunk
        finally:
            os.close(fd)
    if len(data) > limit:
        raise ValueError(f"{path}: more than the {limit} bytes gb reads")
    return bytes(data)


def read_text_untrusted(path: str | Path, limit: int = MAX_READ_BYTES) -> str:
    return read_untrusted(path, limit).decode("utf-8")


def read_json(path: str | Path) -> Any:
    return json.loads(read_untrusted(path))


def read_csv_untrusted(path: str | Path, **options):
    import pandas as pd

    return pd.read_csv(io.BytesIO(read_untrusted(path)), **options)


def load_npz_untrusted(path: str | Path):
    return np.load(io.BytesIO(read_untrusted(path)), allow_pickle=False)


class NotGbs(GbError):
    """A file of a run directory that is not gb's to load: `why` says why."""

    def __init__(self, path: str | Path, why: str):
        super().__init__(f"{path}: {why}")
        self.path, self.why = path, why


def load_tensors_untrusted(path: str | Path, limit: int = MAX_READ_BYTES) -> Any:
    """A torch file of a run directory as data: never through a link, at most `limit` bytes unpacked,
    torch.load with weights_only=True (a pickle payload is refused, never run)."""
    import pickle
    import warnings

    import torch

    try:
        with os.fdopen(open_fd(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as fh:   # a FIFO must not block the open
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise NotGbs(path, "not a regular file")
            size = info.st_size
            if size <= limit and zipfile.is_zipfile(fh):
                with zipfile.ZipFile(fh) as archive:
                    size = max(size, sum(i.file_size for i in archive.infolist()))
            if size > limit:
                raise NotGbs(path, f"{size / 2 ** 20:,.0f} MB, more than gb's limit of {limit / 2 ** 20:,.0f} MB "
                                   f"for a network (not read)")
            fh.seek(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # e.g. a pickle protocol torch did not write
                return torch.load(fh, weights_only=True, map_location="cpu")
    except NotGbs:
        raise
    except pickle.UnpicklingError:   # what weights_only raises for any object other than tensors
        raise NotGbs(path, "holds objects other than tensors (refused, never loaded)") from None
    except Exception as exc:   # noqa: BLE001 (missing, a link, truncated, foreign)
        raise NotGbs(path, f"not a readable checkpoint ({type(exc).__name__})") from None


def write_npz(path: str | Path, **arrays: np.ndarray) -> None:
    """An .npz as np.savez_compressed writes it, at zlib level 1 (float64 barely compresses)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for name, a in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asanyarray(a), allow_pickle=False)
    atomic_write_bytes(path, buf.getvalue())


MAX_YAML_DEPTH = 64   # nesting levels of a YAML file gb reads back (its own are at most 5 deep)


def load_yaml(text: str) -> Any:
    """The one reader of YAML gb wrote and reads back: safe types, libyaml when there. Received data:
    an alias (a few lines can stand for billions of nodes) or nesting deeper than MAX_YAML_DEPTH is
    refused (yaml.YAMLError) before anything is built."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _no_shared_nodes(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _no_shared_nodes(root) -> None:
    """yaml.YAMLError when a node is reached twice (an alias) or lies deeper than MAX_YAML_DEPTH."""
    seen: set[int] = set()
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if id(node) in seen:
            raise yaml.YAMLError(f"YAML aliases are not read from a run directory (line {node.start_mark.line + 1})")
        if depth > MAX_YAML_DEPTH:
            raise yaml.YAMLError(f"nested more than {MAX_YAML_DEPTH} levels deep (line {node.start_mark.line + 1})")
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack += [(n, depth + 1) for n in node.value]
        elif isinstance(node, yaml.MappingNode):
            stack += [(n, depth + 1) for pair in node.value for n in pair]


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:
        return True


def dump_yaml(data: Any) -> str:
    """YAML text of `data` (keys in order, safe types), never with an alias (`load_yaml` refuses them)."""
    return yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False)


def write_csv(path: str | Path, frame) -> None:
    atomic_write_text(path, frame.to_csv(index=False))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer, np.floating, np.ndarray)):
        return obj.tolist()   # Python ints and floats
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def flatten(d: dict, prefix: str = "") -> dict:
    """A nested mapping (a saved config) as {"dotted.key.path": value}."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# ------------------------------------------------------------------ links, the one place they are checked


def is_link(path: str | Path) -> bool:
    return os.path.islink(path)


def present(path: str | Path) -> bool:
    """Something is there (a dangling link too, or a staged file)."""
    return os.path.abspath(path) in (_STAGE.get() or {}) or os.path.lexists(path)


def is_file(path: str | Path) -> bool:
    """A regular file, not a link to one (or a staged file)."""
    return os.path.abspath(path) in (_STAGE.get() or {}) or (not os.path.islink(path) and os.path.isfile(path))


def is_dir(path: str | Path) -> bool:
    return not os.path.islink(path) and os.path.isdir(path)


def subdirs(path: str | Path, hidden: bool = True) -> list[Path]:
    """The real folders in `path` (sorted; links and, with `hidden` False, dot-folders left out)."""
    return sorted(p for p in Path(path).iterdir() if is_dir(p) and (hidden or not p.name.startswith("."))) \
        if is_dir(path) else []


def mtime(path: str | Path) -> float:
    """The modification time of `path` itself (a link's own time, never its target's)."""
    return os.lstat(path).st_mtime


def open_fd(path: str | Path, flags: int, mode: int = 0o666) -> int:
    """os.open that never follows a link (ELOOP on one) and closes on exec."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def open_lock(path: str | Path) -> int:
    """A lock file opened read-write (created when absent), never through a link (GbError)."""
    try:
        fd = open_fd(path, os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise GbError(f"{path}: is a symlink; gb never writes through a symlink inside a run directory") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise GbError(f"{path}: not a regular file (gb's lock file)")
    return fd


def open_append(path: str | Path, buffering: int = -1):
    """A text file opened for appending (created when absent), never through a link (OSError ELOOP)."""
    fd = open_fd(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    return os.fdopen(fd, "a", buffering=buffering, encoding="utf-8")


def _short(text, limit: int = 120) -> str:
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit // 2]}...{text[-limit // 2:]}"


def check_tree(root: str | Path, foreign: frozenset[str] = FOREIGN) -> None:
    """Refuse a run or sweep directory holding a symlink, FIFO, socket or device where gb owns it (gb
    would write or remove through it). The root may be a link (the user named it); `foreign` top-level
    folders (submitit's `slurm/`) are not walked."""
    for p, mode in entries_below(root, foreign):
        if stat.S_ISLNK(mode):
            try:
                target = os.readlink(p)
            except OSError:
                target = "?"
            raise GbError(f"{_short(p, 200)}: is a symlink (to {_short(target)}); gb never writes or removes "
                          f"through a symlink inside a run directory (replace it by the file or folder itself)")
        if not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
            raise GbError(f"{_short(p, 200)}: not a regular file or folder (a FIFO, socket or device); gb "
                          f"writes only files and folders into a run directory (remove it)")


def remove(path: str | Path) -> None:
    """Remove a file or folder of gb's; a symlink is removed itself, never followed (nor by rmtree)."""
    path = Path(path)
    if os.path.islink(path) or (path.exists() and not path.is_dir()):
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


RECORD_LIMIT = 64 * 1024 ** 2   # a JSON record larger than this is not gb's


def read_record(path: str | Path, limit: int = RECORD_LIMIT) -> dict | None:
    """A JSON record as a dict; None when missing, a link, unreadable or not a mapping (lenient)."""
    try:
        rec = json.loads(read_untrusted(path, limit))
    except (OSError, ValueError, RecursionError):   # ValueError: not a regular file, too large, not JSON, not UTF-8
        return None
    return rec if isinstance(rec, dict) else None


def read_only_fs(path: Path) -> bool:
    """A directory on a read-only or virtual file system (root ignores permission bits, not these)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return True
    return bool(st.f_flag & os.ST_RDONLY) or str(path.resolve()).startswith(("/proc", "/sys"))
