"""Live tracking in MLflow (issue 35), against a real MLflow tracking server started here and read
back with `MlflowClient`: a training logged while it runs, interrupted and resumed into the same
MLflow run; fit-svm and a later export continuing that run; a sweep as the parent run of its points;
and a server that does not answer costing one warning line, never the run."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

import forked_gb  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow   # an MLflow server and subprocesses of gb (a few minutes)

CONFIG = """\
name: live
dataset: {name: digits, train_size: 200, val_size: 300, data_seed: 1}
model: {kind: gln, hidden_units: 4}
contexts: {count: 2, seed: 1}
training: {batch_size: 50, lr: 0.04, epochs: EPOCHS, log_points: 60, checkpoint_seconds: 1}
svm: {objectives: [svm-gln, svm-l2]}
"""


def gb(*args, cwd, timeout=600):
    return forked_gb.run(args, cwd, timeout=timeout, argv0=forked_gb.CLI)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real MLflow tracking server (SQLite backend, served artifacts), stopped at the end."""
    where = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1",
                             "--port", str(port), "--workers", "1",
                             "--backend-store-uri", f"sqlite:///{where / 'mlflow.db'}",
                             "--artifacts-destination", str(where / "artifacts")],
                            cwd=where, stdout=open(where / "server.log", "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None and time.time() < deadline, (where / "server.log").read_text()[-3000:]
            time.sleep(0.5)
        yield uri
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def runs_of(client: MlflowClient, path: Path, experiment: str = "gb") -> list:
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    return [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("gb.path") == str(path.resolve())]


def test_a_training_is_tracked_live_interrupted_and_resumed_into_one_mlflow_run(server, tmp_path):
    client = MlflowClient(server)
    (tmp_path / "cfg.yaml").write_text(CONFIG.replace("EPOCHS", "6000"))   # 24,000 steps: tens of seconds
    run_dir = tmp_path / "r"
    cmd = [sys.executable, "-m", "gbcli.cli", "train-gd", "cfg.yaml", "--out", "r", "-q", "--name", "live-one",
           "--tag", "who=test", "--set", f"tracking.mlflow={server}"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # while it trains: the MLflow run is RUNNING and already holds curve points
    seen = None
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        found = runs_of(client, run_dir)
        if found and found[0].info.status == "RUNNING":
            history = client.get_metric_history(found[0].info.run_id, "train_loss")
            if len(history) >= 3:
                seen = (found[0].info.run_id, len(history))
                break
        time.sleep(0.5)
    assert seen is not None and proc.poll() is None, "no live curve points while the training ran"
    time.sleep(3)
    proc.send_signal(signal.SIGINT)   # Ctrl-C: gb checkpoints and stops
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, out + err
    stopped = client.get_run(seen[0])
    assert stopped.info.status == "KILLED", err
    assert stopped.info.run_name == "live-one"
    assert stopped.data.params["model.hidden_units"] == "4" and stopped.data.tags["gb.tag.who"] == "test"
    assert "tracking.mlflow" not in stopped.data.params   # where it is tracked is not what it computes

    p = gb(*cmd[3:], cwd=tmp_path)   # the rerun resumes from its checkpoint, into the same MLflow run
    assert p.returncode == 0, p.stdout + p.stderr
    assert "tracking" not in p.stderr
    (only,) = runs_of(client, run_dir)
    assert only.info.run_id == seen[0]
    assert only.info.status == "FINISHED" and only.info.run_name == "live-one"
    metrics = pd.read_csv(run_dir / "gd" / "metrics.csv")
    history = client.get_metric_history(only.info.run_id, "train_loss")
    logged = {}
    for m in history:
        logged.setdefault(m.step, m.value)
    assert set(logged) == set(metrics["step"])   # every row of metrics.csv, none invented
    for step, value in zip(metrics["step"], metrics["train_loss"]):
        assert logged[step] == pytest.approx(value, rel=1e-6)
    times = [m.timestamp for m in sorted(history, key=lambda m: m.timestamp)]
    assert times[-1] - times[0] >= 3000   # measured as the training went, not stamped at the end
    assert only.data.metrics["gd-gln.val_error"] == pytest.approx(
        pd.read_json(run_dir / "gd" / "summary.json", typ="series")["val_error"])
    names = {a.path for a in client.list_artifacts(only.info.run_id, "gd")}
    assert {"gd/metrics.csv", "gd/summary.json", "gd/config.yaml"} <= names

    # fit-svm and compare continue it; a later export finds it up to date: one run, never two
    assert gb("fit-svm", "cfg.yaml", "--out", "r", "-q", "--set", f"tracking.mlflow={server}", cwd=tmp_path).returncode == 0
    assert gb("compare", "r", cwd=tmp_path).returncode == 0
    p = gb("runs", "export", "mlflow", "--dir", tmp_path, "--tracking-uri", server, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "View run" not in p.stdout + p.stderr and "View experiment" not in p.stdout, p.stdout   # MLflow's own lines
    (only,) = runs_of(client, run_dir)
    assert only.info.run_id == seen[0] and only.info.status == "FINISHED"
    assert 0 <= only.data.metrics["svm-gln.inconsistency"] <= 1
    assert only.data.tags["gb.status"] == "complete"
    assert len(client.get_metric_history(only.info.run_id, "train_loss")) == len(history)   # curves not doubled
    assert "tables" in {a.path for a in client.list_artifacts(only.info.run_id)}


def test_a_tracked_sweep_is_the_parent_run_of_its_points(server, tmp_path):
    client = MlflowClient(server)
    cfg = CONFIG.replace("EPOCHS", "10").replace("svm-gln, svm-l2", "svm-gln") + (
        "grid: {model.hidden_units: [3, 4]}\nsweep: {jobs: 2}\ntracking: {experiment: sweeps}\n")
    (tmp_path / "sweep.yaml").write_text(cfg)
    p = gb("sweep", "sweep.yaml", "--out", "s", "--set", f"tracking.mlflow={server}", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    # issue 49: MLflow's "View run / View experiment" lines (5 runs ended on a server) never reach the terminal
    assert "View run" not in p.stdout + p.stderr and "View experiment" not in p.stdout + p.stderr, p.stdout
    (parent,) = runs_of(client, tmp_path / "s", "sweeps")
    assert parent.info.status == "FINISHED" and parent.data.tags["gb.kind"] == "sweep"
    assert parent.data.params["grid.model.hidden_units"] == "[3, 4]" and "model.hidden_units" not in parent.data.params
    exp = client.get_experiment_by_name("sweeps").experiment_id
    children = client.search_runs([exp], filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert sorted(c.info.run_name for c in children) == ["s/hidden_units=3", "s/hidden_units=4"]
    for c in children:
        assert c.info.status == "FINISHED"
        assert len(client.get_metric_history(c.info.run_id, "train_loss")) > 5
        assert 0 <= c.data.metrics["svm-gln.inconsistency"] <= 1
    assert "figures" in {a.path for a in client.list_artifacts(parent.info.run_id)}


def test_a_tracking_server_that_does_not_answer_costs_one_line_not_the_run(tmp_path):
    (tmp_path / "cfg.yaml").write_text(CONFIG.replace("EPOCHS", "10"))
    (tmp_path / "sweep.yaml").write_text(CONFIG.replace("EPOCHS", "10") + "grid: {model.hidden_units: [3, 4]}\n")
    dead = f"http://127.0.0.1:{free_port()}"   # nothing listens there
    p = gb("train-gd", "cfg.yaml", "--out", "r", "-q", "--set", f"tracking.mlflow={dead}", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    lines = [line for line in (p.stdout + p.stderr).splitlines() if "tracking" in line]   # gb's log: stdout
    assert len(lines) == 1 and dead in lines[0] and "without tracking" in lines[0], p.stdout + p.stderr
    assert "Traceback" not in p.stderr and (tmp_path / "r" / "gd" / "summary.json").is_file()
    p = gb("sweep", "sweep.yaml", "--out", "s", "--set", f"tracking.mlflow={dead}", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert len([line for line in (p.stdout + p.stderr).splitlines() if "tracking" in line]) == 1, p.stdout + p.stderr
    # a URI gb does not track to is bad input, before anything runs
    p = gb("train-gd", "cfg.yaml", "--out", "r2", "--set", "tracking.mlflow=ftp://x", cwd=tmp_path)
    assert p.returncode == 2 and "tracking.mlflow" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "r2").exists()
