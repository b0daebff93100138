"""A run's or sweep's labels (`--name`, `--tag KEY=VALUE`, `--note`), kept in `labels.json`, shown by
`gb runs` and exported to MLflow; they never change what a run computes or its id."""

from __future__ import annotations

import re
from pathlib import Path

from gbcli.errors import GbError
from gbcli.fs.layout import RunDir
from gbcli.fs.safe import read_record, write_json
from gbcli.text import quoted

TAG_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
LIMITS = {"--name": 100, "--tag": 250, "--note": 2000}


def _text(flag: str, value: str) -> str:
    if not value or len(value) > LIMITS[flag] or not value.isprintable() or value != value.strip():
        raise GbError(f"{flag}: {quoted(value, 60)} is not a label (1-{LIMITS[flag]} printable characters, "
                      f"no leading or trailing space)")
    return value


def check_labels(name: str | None = None, tags: list[str] | tuple[str, ...] = (), note: str | None = None) -> dict:
    """The labels given on the command line, checked (GbError naming the flag); {} when none."""
    labels: dict = {}
    if name is not None:
        labels["name"] = _text("--name", name)
    parsed = {}
    for tag in tags:
        key, sep, value = tag.partition("=")
        if not sep or not TAG_KEY.fullmatch(key):
            raise GbError(f"--tag: {quoted(tag, 60)} is not KEY=VALUE (a key of letters, digits and _ . -, "
                          f"at most 64 characters)")
        parsed[key] = _text("--tag", value)
    if parsed:
        labels["tags"] = parsed
    if note is not None:
        labels["note"] = _text("--note", note)
    return labels


def read_labels(folder: str | Path) -> dict:
    """A directory's labels ({} when it has none or they are not gb's): only checked values."""
    if (rec := read_record(RunDir(folder).labels)) is None:
        return {}
    try:
        tags = rec.get("tags") if isinstance(rec.get("tags"), dict) else {}
        return check_labels(rec.get("name") if isinstance(rec.get("name"), str) else None,
                            [f"{k}={v}" for k, v in tags.items() if isinstance(k, str) and isinstance(v, str)],
                            rec.get("note") if isinstance(rec.get("note"), str) else None)
    except GbError:   # a received file that is not gb's: no labels rather than a refusal
        return {}


def write_labels(folder: str | Path, labels: dict) -> None:
    """Add `labels` to a directory's (a new name or note replaces the old; tags are merged)."""
    if not labels:
        return
    merged = read_labels(folder)
    merged.update({k: v for k, v in labels.items() if k != "tags"})
    if labels.get("tags"):
        merged["tags"] = {**merged.get("tags", {}), **labels["tags"]}
    write_json(RunDir(folder).labels, merged)
