"""Ctrl-C and SIGTERM stop every gb command promptly: real signals to real processes, no mocks.

A sweep cancels its queued points, terminates its workers, records the points that were running
as interrupted (never done), prints one line and exits 130; rerunning the same command finishes
the grid. `gb train-gd` stops the same way (its progress bar on a terminal says nothing more)."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

pytestmark = pytest.mark.slow   # subprocesses of gb, end to end: `make test-fast` leaves the file out

GB = (sys.executable, "-c", "from gbcli.cli import main; main()")
LINE = "gb: interrupted ({}); finished work is kept, rerun the same command to resume"
# slow enough that a point is still running when the signal arrives, small enough that the whole
# grid finishes in about a minute on a busy 2-core machine
BASE = {"dataset": {"name": "digits", "train_size": 500, "val_size": 300},
        "model": {"kind": "gln", "hidden_units": 3}, "contexts": {"count": 4},
        "training": {"epochs": 150, "batch_size": 16}, "sweep": {"batch": 1}}


def env(data_dir: Path) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "GB_DATA_DIR": str(data_dir)}


def write(tmp_path: Path, name: str, **extra) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**BASE, "name": name, **extra}))
    return path


def start(tmp_path, data_dir, *args, **kw) -> subprocess.Popen:
    """gb in its own session (its pid is its process group), like a job in a terminal."""
    return subprocess.Popen([*GB, *args], cwd=tmp_path, env=env(data_dir), start_new_session=True, text=True,
                            **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kw})


def wait_for(what, timeout: float, proc: subprocess.Popen | None = None):
    """Poll `what()` until it is truthy; fails when `proc` ends first or after `timeout` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"gb ended (exit {proc.returncode}) before the signal:\n{out}\n{err}")
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout} s")


def group_left(pgid: int) -> list[str]:
    """The live (not zombie) processes of process group `pgid`, from /proc."""
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()   # after "pid (comm) ": state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            left.append(text[:text.rindex(")") + 1])
    return left


def stopped(proc: subprocess.Popen, sig: int, group: bool) -> tuple[float, str, str]:
    """Send `sig` (to the process group: a terminal's Ctrl-C; else to gb only); the seconds until
    gb exited, its stdout and stderr. No process of its group is left afterwards."""
    t = time.monotonic()
    (os.killpg if group else os.kill)(proc.pid, sig)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"gb did not exit within 30 s of {signal.Signals(sig).name}:\n{out}\n{err}")
    seconds = time.monotonic() - t
    end = time.monotonic() + 10   # the resource tracker ends when its pipe closes
    while group_left(proc.pid) and time.monotonic() < end:
        time.sleep(0.1)
    assert not group_left(proc.pid), f"processes left behind: {group_left(proc.pid)}"
    return seconds, out, err


def points(out: Path) -> dict[str, dict]:
    """Each point directory: started (has a log), done (tables/errors.csv), its failed.json status."""
    info = {}
    for d in sorted((out / "points").glob("*")):
        failed = d / "failed.json"
        info[d.name] = {"started": (d / "log.txt").is_file(), "done": (d / "tables" / "errors.csv").is_file(),
                        "status": yaml.safe_load(failed.read_text())["status"] if failed.is_file() else None,
                        "failed": yaml.safe_load(failed.read_text()) if failed.is_file() else None}
    return info


def check_interrupted(info: dict, jobs: int) -> list[str]:
    """Every point that started is done or recorded as interrupted (at most `jobs` were running);
    no other point has a record; returns the interrupted points."""
    interrupted = [p for p, i in info.items() if i["status"] == "interrupted"]
    assert 1 <= len(interrupted) <= jobs, info
    for p, i in info.items():
        if i["done"]:
            assert i["status"] is None, (p, i)
        elif i["started"]:
            assert i["status"] == "interrupted", (p, i)
            rec = i["failed"]
            assert rec["stage"] in ("train-gd", "fit-svm", "compare") and "interrupted" in rec["message"]
            assert rec["log"].endswith("log.txt")
        else:   # queued: never started
            assert i["status"] is None, (p, i)
    return interrupted


def one_line(err: str, signame: str) -> None:
    assert "Traceback" not in err, err
    assert err.splitlines() == [LINE.format(signame)], err


@pytest.mark.slow
def test_ctrl_c_stops_a_sweep_at_once_and_the_same_command_resumes_it(tmp_path, shared_data_dir):
    """Ctrl-C (SIGINT to the process group, workers included) soon after the first point started:
    exit 130 within seconds, one line, no process left, the running points recorded as interrupted
    (listed so in failures.csv, not done), the queued ones not started; the same command then
    runs every point to the end."""
    cfg = write(tmp_path, "grid", grid={"contexts.seed": [1, 2, 3, 4, 5, 6]})
    args = ("sweep", cfg.name, "-q", "--out", "OUT", "--jobs", "2")
    out = tmp_path / "OUT"
    proc = start(tmp_path, shared_data_dir, *args)
    wait_for(lambda: list(out.glob("points/*/log.txt")), 120, proc)
    seconds, stdout, err = stopped(proc, signal.SIGINT, group=True)
    assert proc.returncode == 130, (stdout, err)
    assert seconds < 15
    one_line(err, "SIGINT")
    info = points(out)
    interrupted = check_interrupted(info, jobs=2)
    assert sum(i["started"] for i in info.values()) < 6   # the queue was cancelled, not run

    # the sweep's tables list an interrupted point as such, never as done
    from gbcli.runs.sweep import aggregate, expand

    aggregate(out, expand(cfg)[1], echo=lambda *_: None)
    table = pd.read_csv(out / "tables" / "failures.csv")
    status = dict(zip(table["point"], table["status"]))
    assert {p for p, s in status.items() if s == "interrupted"} == set(interrupted)
    assert len(status) == 6 - sum(i["done"] for i in info.values())
    assert set(status.values()) <= {"interrupted", "not run"}

    done = subprocess.run([*GB, *args], cwd=tmp_path, env=env(shared_data_dir), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    info = points(out)
    assert len(info) == 6 and all(i["done"] and i["status"] is None for i in info.values()), info
    assert pd.read_csv(out / "tables" / "failures.csv").empty
    assert not list(out.rglob(".*.tmp"))


@pytest.mark.slow
def test_sigterm_to_the_sweep_process_stops_its_workers(tmp_path, shared_data_dir):
    """SIGTERM to the sweep process only (its workers get nothing from outside), once a point has
    finished and others run: the workers are stopped, the finished point stays done (no record),
    the running ones are interrupted, one line, exit 130."""
    cfg = write(tmp_path, "term", grid={"contexts.seed": [1, 2, 3, 4, 5, 6, 7, 8]},
                training={**BASE["training"], "epochs": 60})
    out = tmp_path / "OUT"
    proc = start(tmp_path, shared_data_dir, "sweep", cfg.name, "-q", "--out", "OUT", "--jobs", "2")
    wait_for(lambda: list(out.glob("points/*/tables/errors.csv")), 180, proc)
    wait_for(lambda: any(not i["done"] for i in points(out).values() if i["started"]), 60, proc)
    seconds, stdout, err = stopped(proc, signal.SIGTERM, group=False)
    assert proc.returncode == 130, (stdout, err)
    assert seconds < 15
    one_line(err, "SIGTERM")
    info = points(out)
    check_interrupted(info, jobs=2)
    assert any(i["done"] for i in info.values())
    assert sum(i["started"] for i in info.values()) < 8


def test_ctrl_c_stops_train_gd_with_one_line(tmp_path, shared_data_dir):
    """gb train-gd with its progress bar on a terminal (stdout a pty), Ctrl-C while it trains: exit
    130, the one line on stderr, no summary (the network is not trained); the same for SIGTERM."""
    cfg = write(tmp_path, "long", training={"epochs": 5000, "batch_size": 16})   # about a minute
    for sig in (signal.SIGINT, signal.SIGTERM):
        run = tmp_path / f"run-{sig.name}"
        master, slave = pty.openpty()
        proc = start(tmp_path, shared_data_dir, "train-gd", cfg.name, "--out", run.name, stdin=slave, stdout=slave)
        os.close(slave)
        screen: list[bytes] = []

        def drain(fd=master, screen=screen):   # keep the terminal read, or the bar blocks gb
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                screen.append(chunk)
        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        try:
            wait_for(lambda: (run / ".gb.lock").is_file(), 120, proc)   # the lock is taken before training
            time.sleep(1.5)
            assert proc.poll() is None
            seconds, stdout, err = stopped(proc, sig, group=True)
        finally:
            reader.join(5)
            os.close(master)
        assert proc.returncode == 130, err
        assert seconds < 15
        one_line(err, sig.name)
        assert not (run / "gd" / "summary.json").exists()


def test_a_signal_during_a_long_solver_call_ends_gb_after_the_grace(tmp_path, shared_data_dir):
    """The main thread inside a long call into C (an OSQP solve asked for 1e-13) cannot take the
    signal: the watchdog ends gb GRACE seconds later, with the same line and exit code 130.
    (SIGTERM: OSQP, like ECOS and SCS, takes SIGINT for itself while it solves.)"""
    from gbcli.interrupts import GRACE

    cfg = write(tmp_path, "solve", dataset={**BASE["dataset"], "train_size": 1000},
                model={"kind": "gln", "hidden_units": 10}, contexts={"count": 8}, training={"epochs": 5},
                svm={"objectives": ["svm-l2"], "solver": "osqp", "eps": 1e-13, "max_iters": 100_000_000})
    trained = subprocess.run([*GB, "train-gd", cfg.name, "-q", "--out", "run"], cwd=tmp_path,
                             env=env(shared_data_dir), capture_output=True, text=True, timeout=300)
    assert trained.returncode == 0, trained.stderr
    proc = start(tmp_path, shared_data_dir, "fit-svm", cfg.name, "-q", "--out", "run")
    log = tmp_path / "run" / "log.txt"
    wait_for(lambda: "solver osqp" in log.read_text(), 120, proc)
    time.sleep(3)   # cvxpy's canonicalization is Python; then OSQP runs for minutes
    assert proc.poll() is None
    seconds, stdout, err = stopped(proc, signal.SIGTERM, group=False)
    assert proc.returncode == 130, (stdout, err)
    assert seconds < GRACE + 30   # without the watchdog OSQP runs on for minutes; a loaded machine adds seconds
    one_line(err, "SIGTERM")
    assert not (tmp_path / "run" / "svm" / "svm-l2" / "result.json").exists()
