"""gb sweep: parallel points, resume after kill -9, failure recording, the lock, and a real Slurm."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from gbcli.runs.sweep import expand, group_points, largest_first, point_id, sweep_lock
import forked_gb

BASE = {"dataset": {"name": "digits", "train_size": 150, "val_size": 300},
        "model": {"kind": "gln", "hidden_units": 3}, "contexts": {"count": 2, "seed": 1},
        "training": {"epochs": 30}, "svm": {"objectives": ["svm-gln", "svm-l2"]}}


def write(tmp_path, grid, zipped=None, name="grid", **extra):
    body = {**BASE, "name": name, "grid": grid, **extra}
    if zipped:
        body["zip"] = zipped
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def gb(tmp_path, *args, **kw):
    return forked_gb.run(args, tmp_path, kw.pop("env", None), argv0=forked_gb.CLI, **kw)


def snapshot(point_dir: Path) -> dict:
    return {p.relative_to(point_dir): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(point_dir.rglob("*")) if p.is_file() and p.name != "log.txt"}


def test_zip_axes_vary_together_and_grid_multiplies(tmp_path):
    path = write(tmp_path, {"training.momentum": [0.0, 0.9]},
                 zipped={"contexts.seed": [1, 2, 3], "dataset.data_seed": [4, 5, 6]})
    _, points = expand(path)
    pairs = sorted((p.training.momentum, p.contexts.seed, p.dataset.data_seed) for p in points)
    assert pairs == sorted((m, s, s + 3) for m in (0.0, 0.9) for s in (1, 2, 3))
    assert len({point_id(p) for p in points}) == 6


def test_an_axis_that_changes_nothing_is_refused_and_a_merge_is_said(tmp_path, caplog):
    """A grid over a key of how a run is done (its name, the sweep's own settings) would give each
    point once whatever its values: refused with one line. Values that compute the same (a repeat,
    0 and 0.0) are merged with a warning that names the axis; a zip may name its points."""
    from gbcli.errors import GbError

    for key, values in (("name", ["a", "b"]), ("sweep.jobs", [1, 2]), ("training.checkpoint_seconds", [0, 60]),
                        ("training.validation", ["logged", "final"])):
        with pytest.raises(GbError, match=f"grid: {key} does not change what a point computes"):
            expand(write(tmp_path, {key: values, "contexts.seed": [1, 2]}))
    for grid, zipped, says in (({}, {"name": ["x", "y"]}, "zip: {'name': 'y'} and {'name': 'x'} differ only in name"),
                               ({"svm": [{"time_limit": 1}, {"time_limit": 2}]}, None, "differ only in svm.time_limit")):
        with pytest.raises(GbError, match=re.escape(says)):   # the same, spelled as a whole point or section
            expand(write(tmp_path, grid, zipped))
    _, points = expand(write(tmp_path, {"name": ["same"], "contexts.seed": [1, 2]}))   # one value: nothing collapses
    assert len(points) == 2
    with caplog.at_level("WARNING", logger="gbcli"):
        _, points = expand(write(tmp_path, {"training.momentum": [0, 0.0, 0.9], "contexts.seed": [1, 2]}))
    assert len(points) == 4
    assert "6 combinations are 4 distinct points: training.momentum changed nothing" in caplog.text, caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="gbcli"):
        _, points = expand(write(tmp_path, {"contexts.seed": [1, 2]}, zipped={"name": ["a", "b"], "dataset.data_seed": [4, 5]}))
    assert sorted(p.name for p in points) == ["a", "a", "b", "b"] and len({point_id(p) for p in points}) == 4 and not caplog.text


def test_groups_run_largest_first(tmp_path):
    """The sweep starts the groups with the most work first (networks x steps x parameters + N^2),
    so the last to start are short; equal groups keep their order."""
    path = write(tmp_path, {"model.hidden_units": [2, 8, 4], "dataset.train_size": [100, 150],
                            "training.momentum": [0.0, 0.9]})
    _, points = expand(path)
    groups = largest_first(group_points(points, 2))
    assert sorted(map(len, groups)) == [2] * 6
    sizes = [(g[0].model.hidden_units, g[0].dataset.train_size) for g in groups]
    assert sizes[0] == (8, 150) and sizes[-1] == (2, 100)
    for h in (2, 4, 8):   # at each width the larger training set (more steps, more margins) first
        assert sizes.index((h, 150)) < sizes.index((h, 100))
    for n in (100, 150):  # at each size the wider network first
        assert sizes.index((8, n)) < sizes.index((4, n)) < sizes.index((2, n))
    assert all({p.training.momentum for p in g} == {0.0, 0.9} for g in groups)


@pytest.mark.slow
def test_local_pool_runs_every_point_and_aggregates(tmp_path):
    path = write(tmp_path, {"contexts.seed": [1, 2], "training.momentum": [0.0, 0.9]})
    proc = gb(tmp_path, "sweep", str(path), "--jobs", "2", "-q")
    assert proc.returncode == 0, proc.stderr
    assert "4 points, 0 done, running 4 (local, 2 at a time)" in proc.stdout
    tables = tmp_path / "runs/grid/tables"
    errors = pd.read_csv(tables / "errors.csv")
    assert len(errors) == 4 * 3 and not errors.duplicated(["point", "predictor"]).any()
    summary = pd.read_csv(tables / "summary.csv")
    # one configuration per (predictor, momentum), each over the two context seeds
    assert len(summary) == 3 * 2 and (summary.n_seeds == 2).all() and (summary.n_failed == 0).all()
    gd = errors[errors.predictor == "gd-gln"]
    for m, grp in gd.groupby("momentum"):
        row = summary[(summary.predictor == "gd-gln") & (summary.momentum == m)].iloc[0]
        assert row.val_error_mean == pytest.approx(grp.val_error.mean())
    assert len(pd.read_csv(tables / "failures.csv")) == 0
    # points.csv: each point with the keys that tell the points apart (and nothing else)
    pts = pd.read_csv(tables / "points.csv").set_index("point")
    assert sorted(pts.columns) == ["contexts.seed", "name", "training.momentum"] and set(pts.index) == set(errors.point)
    assert set(pts["name"]) == {f"seed={s},momentum={m}" for s in (1, 2) for m in (0.0, 0.9)}   # readable names
    assert all(pts.loc[r.point, "contexts.seed"] == r.context_seed for r in errors.itertuples())
    # the solve cache: each momentum-0.9 point reuses the programs of its momentum-0 twin
    twin = {(r.context_seed, r.momentum): r.point for r in errors.itertuples()}
    for (seed, m), pid in twin.items():
        for o in ("svm-gln", "svm-l2"):
            rec = json.loads((tmp_path / "runs/grid/points" / pid / "svm" / o / "result.json").read_text())
            assert rec.get("cached_from") == (f"{twin[seed, 0.0]}/{o}" if m == 0.9 else None)
        # one torch thread per job by default (sweep.threads)
        assert ", torch threads 1\n" in (tmp_path / "runs/grid/points" / pid / "log.txt").read_text()
    assert sorted(p.name for p in (tmp_path / "runs/grid/figures").glob("*.png")) == [
        "a_gd_vs_svm_error.png", "b_inconsistency_vs_gd_error.png", "c_best_configuration.png",
        "d_error_vs_units.png", "panels.png"]
    again = gb(tmp_path, "sweep", str(path), "-q")
    assert again.returncode == 0 and "4 points, 4 done, running 0" in again.stdout
    # the grid narrowed in the same folder: the other points' folders stay, said on one line (an odd
    # folder name escaped), out of the tables
    write(tmp_path, {"contexts.seed": [1], "training.momentum": [0.0, 0.9]})
    (tmp_path / "runs/grid/points/0\nodd").mkdir()
    narrowed = gb(tmp_path, "sweep", str(path), "-q")
    assert narrowed.returncode == 0 and "2 points, 2 done, running 0" in narrowed.stdout
    said = [line for line in narrowed.stdout.splitlines() if "are not in this grid" in line]
    assert len(said) == 1 and said[0].startswith("3 point folders in") and "(0\\nodd, " in said[0], narrowed.stdout
    assert len(list((tmp_path / "runs/grid/points").iterdir())) == 5
    assert set(pd.read_csv(tables / "errors.csv").context_seed) == {1}


@pytest.mark.slow
def test_kill_minus_nine_then_rerun_completes_without_duplicates(tmp_path):
    # groups of 2 networks: a group of all 6 (the default batch of 12) trains at once and then
    # finishes its points within a fraction of a second, before the kill could land between them
    path = write(tmp_path, {"contexts.seed": [1, 2, 3, 4, 5, 6]}, training={"epochs": 150}, sweep={"batch": 2})
    out = tmp_path / "runs/grid"
    proc = subprocess.Popen([sys.executable, "-m", "gbcli.cli", "sweep", str(path), "-q"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while len(list(out.glob("points/*/tables/errors.csv"))) < 2 and time.time() < deadline:
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = sorted(p.parents[1] for p in out.glob("points/*/tables/errors.csv"))
    assert 2 <= len(done) < 6, "the kill should land in the middle of the sweep"
    before = {d.name: snapshot(d) for d in done}
    time.sleep(1.5)  # the killed sweep's worker dies with it: nothing changes in the directory afterwards
    assert {d.name: snapshot(d) for d in done} == before

    rerun = gb(tmp_path, "sweep", str(path), "-q")
    assert rerun.returncode == 0, rerun.stderr
    assert f"6 points, {len(done)} done, running {6 - len(done)}" in rerun.stdout
    assert {d.name: snapshot(d) for d in done} == before     # finished points untouched, byte for byte
    errors = pd.read_csv(out / "tables/errors.csv")
    assert len(errors) == 6 * 3 and not errors.duplicated(["point", "predictor"]).any()
    assert errors.val_error.notna().all()
    assert not list(out.rglob("*.tmp")), "no half-written files left behind"


@pytest.mark.slow
def test_failed_point_is_recorded_and_the_sweep_goes_on(tmp_path):
    # one iteration of the dual solver cannot certify anything: that point fails at fit-svm
    path = write(tmp_path, {"svm.max_iters": [1, 100]})
    proc = gb(tmp_path, "sweep", str(path), "-q")
    assert proc.returncode == 1
    assert "1 of 2 points done, 1 failed" in proc.stdout
    failures = pd.read_csv(tmp_path / "runs/grid/tables/failures.csv")
    assert len(failures) == 1 and failures.stage[0] == "fit-svm" and "not certified" in failures.message[0]
    log = Path(failures.log[0])
    assert log.is_file() and "FAILED at fit-svm" in log.read_text()
    errors = pd.read_csv(tmp_path / "runs/grid/tables/errors.csv")
    assert errors.point.nunique() == 1 and len(errors) == 3
    assert failures.point[0] not in set(errors.point)


@pytest.mark.slow
def test_second_sweep_on_the_same_directory_is_refused(tmp_path):
    path = write(tmp_path, {"contexts.seed": [1, 2]})
    with sweep_lock(tmp_path / "runs/grid"):
        proc = gb(tmp_path, "sweep", str(path), "-q")
    assert proc.returncode == 2
    assert "another sweep is running on this directory" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs/grid/points").exists()


@pytest.mark.slow
def test_invalid_grid_point_is_refused_before_anything_runs(tmp_path):
    path = write(tmp_path, {"contexts.count": [2, 3]})
    proc = gb(tmp_path, "sweep", str(path), "-q")
    assert proc.returncode == 2 and "contexts.count" in proc.stderr and "power of two" in proc.stderr
    assert not (tmp_path / "runs").exists()


def slurm_answers() -> str | None:
    if not shutil.which("sinfo"):
        return "no Slurm installed (scripts/slurm-cluster.sh start installs and starts one)"
    try:
        ok = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "the Slurm controller does not answer"
    if ok.returncode != 0 or not ok.stdout.strip():
        return "the Slurm controller does not answer (scripts/slurm-cluster.sh start)"
    return None


@pytest.mark.slurm
@pytest.mark.slow
def test_slurm_executor_runs_a_real_job_array(tmp_path):
    why = slurm_answers()
    if why:
        pytest.skip(why)
    path = write(tmp_path, {"contexts.seed": [1, 2], "training.momentum": [0.0, 0.9]}, name="slurmgrid")
    proc = gb(tmp_path, "sweep", str(path), "--executor", "slurm", "--jobs", "2", "--set", "sweep.cpus=1",
              "--set", "sweep.mem_gb=2", "--set", "sweep.time_min=10", "-q", timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "submitted Slurm array" in proc.stdout
    errors = pd.read_csv(tmp_path / "runs/slurmgrid/tables/errors.csv")
    assert errors.point.nunique() == 4 and len(errors) == 12
    assert (errors[errors.predictor != "gd-gln"].status == "optimal").all()
    # each point ran inside a Slurm task: its log names a Slurm job
    assert list((tmp_path / "runs/slurmgrid/slurm").rglob("*_log.out"))


def test_a_points_done_marker_is_written_after_both_tables(tmp_path):
    """A sweep counts a point as done when tables/errors.csv exists, so write_tables writes it last:
    a kill -9 between the two writes once left a "done" point without inconsistency.csv."""
    from gbcli.reports.tables import write_tables

    frame = pd.DataFrame({"a": [1.0]})
    write_tables(tmp_path, frame, frame)
    t = {n: (tmp_path / "tables" / f"{n}.csv").stat().st_mtime_ns for n in ("errors", "inconsistency")}
    assert t["inconsistency"] < t["errors"], t


@pytest.mark.slow
def test_a_sweep_written_to_a_file_reports_points_as_they_finish(tmp_path):
    """Issue 49, item 7: a sweep whose output is a file printed "sweep: N points" and then nothing
    until its one task (every point, trained as one computation) returned. The points of a running
    task are now reported as their folders show them done: the first progress line, naming the
    point, is in the file while later points of the same task are still solving."""
    # programs large enough (N = 1400; H = 40, C = 8) that each point's solves take about a second, so the
    # four points end seconds apart: at N = 600 all four could land between two looks at the folders (1 s)
    path = write(tmp_path, {"contexts.seed": [1, 2, 3, 4]}, dataset={"name": "digits", "train_size": 1400,
                                                                   "val_size": 300},
                 model={"kind": "gln", "hidden_units": 40}, contexts={"count": 8, "seed": 1})
    assert len(group_points(expand(path)[1], 12)) == 1   # one task: its points end one after the other
    log = tmp_path / "out.txt"
    with log.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "gbcli.cli", "sweep", str(path)], cwd=tmp_path,
                                stdout=fh, stderr=subprocess.STDOUT)
    points = tmp_path / "runs/grid/points"
    finished_then = None
    try:
        deadline = time.time() + 600   # a hang guard
        while proc.poll() is None and time.time() < deadline:
            if "sweep: 1/4 points" in log.read_text():
                finished_then = len(list(points.glob("*/tables/errors.csv")))
                break
            time.sleep(0.05)
        assert proc.wait(timeout=600) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert finished_then is not None, text
    assert finished_then < 4, f"the first point was reported only when all had finished:\n{text}"
    first = next(line for line in text.splitlines() if "sweep: 1/4 points" in line)
    assert re.search(r"last [0-9a-f]{10} \(seed=\d\) done", first), first   # which point, by its readable name
    assert "sweep grid: aggregating the tables and figures of 4 points" in text
