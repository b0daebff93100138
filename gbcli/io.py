"""Atomic result files: write to a temporary file in the same directory, then rename.

A reader (or a rerun after a crash) therefore sees either the old file or the complete new
one, never a half-written file. Files get the mode the umask allows (0666 & ~umask), like any
file the user creates.
"""

from __future__ import annotations

import io
import json
import os
import stat
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` atomically (temp file + fsync + rename)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
    try:
        os.fchmod(fd, 0o666 & ~current_umask())   # mkstemp creates 0600; results are for colleagues too
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:   # a full disk: say which file could not be written
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    """The process umask (reading it means setting it; set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def clean_temp_files(directory: str | Path) -> None:
    """Remove the temporary files that a process killed mid-write left in `directory` (recursively)."""
    directory = Path(directory)
    if directory.is_dir():
        for stale in directory.rglob(".*.tmp"):
            stale.unlink(missing_ok=True)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


MAX_READ_BYTES = 1024 ** 3   # larger than any file gb writes into a run directory


def read_untrusted(path: str | Path, limit: int = MAX_READ_BYTES) -> bytes:
    """The bytes of a file gb reads from a run directory, which may have been received from anyone:
    never through a symlink (O_NOFOLLOW), only a regular file (opened non-blocking, so a FIFO put
    where a record belongs cannot hang the reader), at most `limit` bytes. OSError or ValueError
    otherwise (the callers turn both into one line naming the file)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path}: not a regular file")
        if st.st_size > limit:
            raise ValueError(f"{path}: {st.st_size} bytes, more than the {limit} gb reads")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise ValueError(f"{path}: more than the {limit} bytes gb reads")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text_untrusted(path: str | Path, limit: int = MAX_READ_BYTES) -> str:
    return read_untrusted(path, limit).decode("utf-8")


def read_json(path: str | Path) -> Any:
    """A JSON file of a run directory (read as `read_untrusted`)."""
    return json.loads(read_untrusted(path))


def read_csv_untrusted(path: str | Path):
    """A CSV table of a run directory as a DataFrame (read as `read_untrusted`)."""
    import pandas as pd

    return pd.read_csv(io.BytesIO(read_untrusted(path)))


def load_npz_untrusted(path: str | Path):
    """An .npz of a run directory, never with pickles (object arrays are refused by numpy)."""
    return np.load(io.BytesIO(read_untrusted(path)), allow_pickle=False)


def write_npz(path: str | Path, **arrays: np.ndarray) -> None:
    """An .npz as np.savez_compressed writes it, but at zlib level 1: float64 results barely
    compress, and level 6 cost 3% of a Figure 2 grid's CPU (issue 13) for a few percent of size."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for name, a in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asanyarray(a), allow_pickle=False)
    atomic_write_bytes(path, buf.getvalue())


def load_yaml(text: str) -> Any:
    """yaml.safe_load with libyaml's parser when PyYAML has it (10x faster: every result table
    reads each stage's config.yaml back)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def write_csv(path: str | Path, frame) -> None:
    """Write a pandas DataFrame as CSV, atomically."""
    atomic_write_text(path, frame.to_csv(index=False))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
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
