"""`gb runs export mlflow`: each directory replayed through the live tracking path (`tracking.Live.replay`),
a sweep as the parent run of its points, into `DIR/mlflow.db` by default (docs/mlflow-and-runs.md).
Input is refused before the store is touched; files are read as untrusted data, links never followed.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from pathlib import Path

from gbcli.config.schema import EXPERIMENT_NAME, tracking_uri_problem
from gbcli.errors import GbError
from gbcli.fs import layout
from gbcli.fs.layout import SweepDir
from gbcli.fs.safe import check_tree, entries_below, is_file, present, read_only_fs, subdirs
from gbcli.logs import Progress
from gbcli.runs.index import read_any, scan
from gbcli.runs.tracking import Live, logged, open_store
from gbcli.text import quoted, shorten


def check_uri(uri: str, key: str) -> None:
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower() if ":" in uri else ""
    why = tracking_uri_problem(uri)   # the one rule, the config's `tracking.mlflow` too
    if why is not None:
        raise GbError(f"{key}: {quoted(uri, 120)} {why}")
    # A SQLite database that cannot be opened: MLflow retries it for ~100 s before failing, so it is
    # refused now. sqlite:///<path> (sqlite:////<absolute path>); sqlite:// alone is in memory.
    rest = uri.split("://", 1)[1] if scheme == "sqlite" and "://" in uri else ""
    db = rest[1:].split("?", 1)[0] if rest.startswith("/") else ""
    if db and db != ":memory:":
        path = Path(db)
        folder = path.parent
        try:   # SQLite writes its journal beside the database: the folder must take new files too
            why = ("its folder does not exist" if not folder.is_dir() else
                   "its folder is not writable" if not os.access(folder, os.W_OK | os.X_OK) or read_only_fs(folder) else
                   "not a regular file" if present(path) and not is_file(path) else
                   "not readable and writable" if present(path) and not os.access(path, os.R_OK | os.W_OK)
                   else None)
        except OSError as exc:
            why = exc.strerror or str(exc)
        if why is not None:
            raise GbError(f"{key}: cannot open the SQLite database {shorten(str(path), 200)}: {why}")


def export(root: str | Path = "runs", tracking_uri: str | None = None, experiment: str = "gb",
           echo=None) -> dict:
    """Log every run and sweep under `root` into the MLflow store at `tracking_uri` (default: SQLite in
    `root`); returns counts of what was logged. Messages go to `echo` (default: the `gbcli` logger)."""
    echo = echo or logging.getLogger("gbcli").info
    root = Path(root)
    if not root.is_dir():
        raise GbError(f"--dir: {root}: not a directory")
    if not EXPERIMENT_NAME.fullmatch(experiment) or ".." in experiment:   # a name, never a path (MLflow's artifacts)
        raise GbError(f"--experiment: {quoted(experiment, 60)} is not a name (letters, digits, space and _ . + = -, "
                      f"1-200 characters, starting with a letter or digit, no '..')")
    # a tree deeper than gb makes is refused before the store is touched; the store gb writes in DIR
    # never through a link (its two entries are walked, the rest is not gb's to refuse)
    top = {p.name for p, _ in entries_below(root) if p.parent == root}
    check_tree(root, foreign=frozenset(top - {layout.MLFLOW_DB, layout.MLFLOW_ARTIFACTS}))
    uri = tracking_uri
    if uri is None:   # SQLite in DIR; URI syntax (? # %) or a control character would put it elsewhere than said
        db = (root / layout.MLFLOW_DB).resolve()
        if odd := sorted({c for c in str(db) if c in "?#%" or not c.isprintable()}):
            raise GbError(f"--dir: {quoted(str(root), 120)} holds {', '.join(map(repr, odd))}, which a sqlite URI "
                          f"cannot carry; use another folder or --tracking-uri")
        uri = f"sqlite:///{db}"
    check_uri(uri, "--dir" if tracking_uri is None else "--tracking-uri")   # a read-only DIR: refused now
    # a config key MLflow refuses as a parameter name would stop the export partway: refused now (those logged)
    todo = [(info, [read_any(p) for p in subdirs(SweepDir(info.path).points)] if info.kind == "sweep" else [])
            for info in scan(root)]
    for one in [d for info, points in todo for d in (info, *points)]:
        for key in map(str, one.config):
            if logged(key) and (
                    not re.fullmatch(r"[/\w.\- :]{1,250}", key) or posixpath.normpath(key) != key
                    or key.startswith(("/", ".."))):
                raise GbError(f"--dir: {shorten(str(one.path), 200)}: its config key {quoted(key, 80)} is not a name "
                              f"MLflow takes for a parameter (letters, digits, _ - . : / and space, at most 250 "
                              f"characters, no empty or '..' part)")
    for info in [info for info, _ in todo if info.kind == "foreign"]:
        echo(f"skipped {info.path}: {info.note}")
    todo = [(info, points) for info, points in todo if info.kind != "foreign"]
    counts = {"runs": 0, "sweeps": 0, "points": 0, "unchanged": 0}
    try:   # each directory replayed: a sweep, then its points as its children
        with Progress(f"exporting to {shorten(uri, 160)} (experiment {experiment})", sum(1 + len(p) for _, p in todo),
                      say=echo, counter="{done}/{total} runs") as bar:
            mlflow_client, exp_id = open_store(uri, experiment, echo)
            for info, points in todo:
                parent = None
                for one in (info, *points):
                    rid, made = Live.replay(mlflow_client, uri, experiment, exp_id, one, parent=parent)
                    counts["points" if parent else "sweeps" if one.kind == "sweep" else "runs"] += made
                    counts["unchanged"] += not made
                    parent = parent or rid
                    bar.advance()
        echo(f"exported to {uri} (experiment {experiment}): {counts['runs']} runs, {counts['sweeps']} sweeps with "
             f"{counts['points']} points; {counts['unchanged']} unchanged since the last export")
        return {"tracking_uri": uri, "experiment_id": exp_id, **counts}
    except GbError:
        raise
    except Exception as exc:   # MLflow's own refusals, a server that does not answer, a full disk
        cause = exc   # the words of sqlite or of the system (a full disk), not those of MLflow's wrapper
        for _ in range(8):
            if cause is None or isinstance(cause, OSError) or type(cause).__module__ == "sqlite3":
                exc = cause or exc
                break
            cause = cause.__cause__ or cause.__context__
        first = (str(exc).strip().splitlines() or [""])[0]
        if isinstance(exc, OSError) and exc.strerror:
            first = f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
        raise GbError(f"gb runs export mlflow: {uri}: {type(exc).__name__}: {shorten(first, 200)}") from None

