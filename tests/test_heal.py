"""A sweep heals what a crash tore inside the folders it made (issue 49, item 14): after a kill -9 and
a power loss that cut the newest files to half their size, a rerun redoes the torn stages and ends
with the tables of a clean sweep. Before: every rerun ended with exit 1 and "failed: point ...
(failed at train-gd): GbError: .../points/<id>/gb-run.json: unreadable or not gb's marker"."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

import forked_gb
from gbcli.fs import layout
from gbcli.store.integrity import heal_point
from gbcli.fs.layout import RunDir

GRID = {"name": "heal", "dataset": {"name": "digits", "train_size": 120, "val_size": 200},
        "model": {"kind": "gln", "hidden_units": 3}, "contexts": {"count": 2, "seed": 1},
        "training": {"epochs": 20}, "svm": {"objectives": ["svm-gln", "svm-l2"]},
        "grid": {"contexts.seed": [1, 2, 3]}}
pytestmark = pytest.mark.slow   # real sweeps: a minute and more

TABLES = ("errors.csv", "inconsistency.csv", "summary.csv")
TIMING = ("solve_seconds",)   # how long a solve took: the one column a rerun may change


def gb(cwd, *args):
    return forked_gb.run(args, cwd, argv0=forked_gb.CLI, timeout=900)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[Path, Path]:
    """(the config, a clean sweep's folder), made once."""
    root = tmp_path_factory.mktemp("heal")
    config = root / "grid.yaml"
    config.write_text(yaml.safe_dump(GRID))
    proc = gb(root, "sweep", str(config), "--out", str(root / "clean"), "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return config, root / "clean"


def halve(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def point_files(point: Path) -> list[Path]:
    """A point's files, newest first (the lock aside: its content is a pid)."""
    files = [p for p in point.rglob("*") if p.is_file() and p.name != layout.LOCK]
    return sorted(files, key=lambda p: p.stat().st_mtime_ns, reverse=True)


def snapshot(point: Path) -> dict:
    return {p.relative_to(point): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in point.rglob("*") if p.is_file() and p.name not in (layout.LOG, layout.LOCK)}


def assert_same_tables(a: Path, b: Path) -> None:
    for name in TABLES:
        x, y = (pd.read_csv(d / "tables" / name) for d in (a, b))
        x, y = (t.drop(columns=[c for c in TIMING if c in t.columns]).sort_values(list(t.columns[:2]) + ["point"]
                if "point" in t.columns else list(t.columns[:2])).reset_index(drop=True) for t in (x, y))
        pd.testing.assert_frame_equal(x, y)


def test_a_rerun_heals_torn_points_and_ends_with_a_clean_sweeps_tables(clean, tmp_path):
    config, clean_dir = clean
    out = tmp_path / "torn"
    shutil.copytree(clean_dir, out)   # copy2: the files keep their times, so "newest" is the sweep's order
    a, b, c = sorted((out / layout.POINTS).iterdir())
    halve(a / layout.MARKER)          # a: the marker and the newest files (tables, the last program's records)
    for p in point_files(a)[:6]:
        halve(p)
    for p in point_files(b):          # b: every file it has (its network, its configs, its solutions)
        halve(p)
    halve(c / layout.MARKER)          # c: only its marker; the point is done, and stays as it is
    kept = {k: v for k, v in snapshot(c).items() if k.name != layout.MARKER}

    proc = gb(tmp_path, "sweep", str(config), "--out", str(out), "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "healing after a crash: torn files in 3 points" in proc.stdout
    assert "3 points, 1 done, running 2" in proc.stdout   # c is done; a and b redo their torn stages
    assert_same_tables(clean_dir, out)
    for point in (a, b, c):   # every marker whole again
        assert json.loads((point / layout.MARKER).read_text())["kind"] == "run"
    assert {k: v for k, v in snapshot(c).items() if k.name != layout.MARKER} == kept
    assert len(pd.read_csv(out / "tables" / "failures.csv")) == 0

    again = gb(tmp_path, "sweep", str(config), "--out", str(out), "-q")   # healed for good: nothing left to redo
    assert again.returncode == 0 and "healing" not in again.stdout and "3 points, 3 done, running 0" in again.stdout
    verify = gb(tmp_path, "verify", str(out))
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr


def test_a_whole_point_is_left_alone_and_each_torn_file_is_named(clean, tmp_path):
    _, clean_dir = clean
    point = tmp_path / "p"
    shutil.copytree(sorted((clean_dir / layout.POINTS).iterdir())[0], point)
    run = RunDir(point)
    before = snapshot(point)
    assert heal_point(point) == [] and snapshot(point) == before   # nothing torn: nothing touched

    # a config cut at a line break is still a YAML mapping: torn all the same (not the config its record
    # hashes: the training section lost, its epochs read as the default)
    text = run.gd_config.read_text()
    run.gd_config.write_text(text[: text.index("\ntraining:") + 1])
    assert yaml.safe_load(run.gd_config.read_text())   # parses
    halve(run.program("svm-l2") / layout.COMPACT)   # a solution whose archive is cut
    halve(run.errors)
    assert heal_point(point) == [run.gd_config, run.program("svm-l2") / layout.COMPACT, run.errors]
    assert not run.summary.exists() and not run.result("svm-l2").exists() and not run.errors.exists()
    assert run.result("svm-gln").exists()   # a whole program of the same problem is kept


def test_a_torn_sweep_marker_is_refused_with_the_way_out(clean, tmp_path):
    config, clean_dir = clean
    out = tmp_path / "torn"
    shutil.copytree(clean_dir, out)
    halve(out / layout.MARKER)
    proc = gb(tmp_path, "sweep", str(config), "--out", str(out), "-q")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"{out / layout.MARKER}: unreadable or not gb's marker" in proc.stderr
    assert f"`rm {out / layout.MARKER}`" in proc.stderr
    (out / layout.MARKER).unlink()   # the way out the line gives
    proc = gb(tmp_path, "sweep", str(config), "--out", str(out), "-q")
    assert proc.returncode == 0 and "3 points, 3 done, running 0" in proc.stdout, proc.stdout + proc.stderr
