"""Tracking that does what the README shows, one scheme for a sweep's MLflow runs live or exported,
and waits that speak without a screenful (issue 49, items 3, 4, 7 and 8), against real MLflow
stores (SQLite in tmp_path) read back with `MlflowClient`, and the real `gb` (forked_gb)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

import forked_gb
from gbcli import logs

TINY = {"name": "tiny", "dataset": {"name": "digits", "train_size": 100, "val_size": 200},
        "model": {"kind": "gln", "hidden_units": 2}, "training": {"epochs": 3}, "svm": {"objectives": ["svm-gln"]}}


def gb(args, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    p = forked_gb.run(args, cwd, env, timeout=timeout)   # stdout and stderr are files: not a terminal
    assert "Traceback" not in p.stderr, p.stderr
    return p


def ok(p: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def mlflow_runs(uri: str, experiment: str = "gb") -> dict:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    return {} if exp is None else {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}


# ------------------------------------------------------------------ item 8: progress lines


def lines_of(seconds: float, steps: int = 3200) -> list[str]:
    """The plain lines of a Progress over `steps` steps that take `seconds` in all (its own clock)."""
    said, now = [], [0.0]
    with logs.Progress("train", steps, say=said.append, clock=lambda: now[0]) as bar:
        for _ in range(steps):
            now[0] += seconds / steps
            bar.advance()
    return said


def test_a_short_wait_is_two_lines_and_a_long_one_speaks_often():
    short = lines_of(1.3)   # the quickstart's training: what it does and where it ended
    assert short[0] == "train: 3200 steps" and len(short) == 2 and "3200/3200 (100%)" in short[-1], short
    assert len(lines_of(4.0)) <= 4   # never two lines within MIN_SECONDS
    medium = lines_of(100.0)   # every 5 % of the work (its 2 s apart)
    assert 19 <= len(medium) <= 22, medium
    long = lines_of(2000.0, steps=10000)   # every 10 s when 5 % takes longer
    assert len(long) >= 150, len(long)


@pytest.mark.slow
def test_train_gd_prints_its_summary_once_and_few_progress_lines(tmp_path):
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({**TINY, "training": {"epochs": 40}}))
    p = ok(gb(["train-gd", "cfg.yaml"], tmp_path))
    lines = p.stdout.splitlines()
    summary = [line for line in lines if "val error" in line]
    assert len(summary) == 1 and "-> runs/tiny/gd" in summary[0], p.stdout
    seconds = json.loads((tmp_path / "runs" / "tiny" / "gd" / "summary.json").read_text())["seconds"]
    progress = [line for line in lines if "train gd-gln:" in line]
    # the first line, the last, and at most one line per MIN_SECONDS of the training between
    assert 2 <= len(progress) <= 2 + seconds / logs.MIN_SECONDS, (seconds, p.stdout)
    quiet = ok(gb(["train-gd", "cfg.yaml", "-q", "--out", "q"], tmp_path)).stdout.splitlines()
    assert len(quiet) == 1 and "val error" in quiet[0] and "-> q/gd" in quiet[0], quiet


# ------------------------------------------------------------------ item 3: the README's tracking command after the tour


@pytest.mark.slow
def test_tracking_a_run_already_trained_logs_it_into_mlflow(tmp_path):
    pytest.importorskip("mlflow")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(TINY))
    for cmd in (["train-gd", "cfg.yaml", "-q"], ["fit-svm", "cfg.yaml", "-q"], ["compare", "runs/tiny"]):
        ok(gb(cmd, tmp_path))
    uri = "sqlite:///runs/mlflow.db"
    p = ok(gb(["train-gd", "cfg.yaml", "--set", f"tracking.mlflow={uri}"], tmp_path))
    said = p.stdout.splitlines()   # what it does, in one line, then the wait for a new database named
    assert len(said) == 2 and "creating the MLflow database" in said[1] and "(about 10 s)" in said[1], p.stdout
    assert "already trained" in said[0] and "gb runs export mlflow" in said[0], p.stdout
    assert "nothing to do" not in p.stdout and str(tmp_path / "runs" / "mlflow.db") in said[0]
    store = f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    (run,) = mlflow_runs(store).values()
    assert run.info.run_name == "tiny" and run.info.status == "FINISHED"
    assert run.data.tags["gb.path"] == str((tmp_path / "runs" / "tiny").resolve())
    assert run.data.params["model.hidden_units"] == "2" and "tracking.mlflow" not in run.data.params
    result = json.loads((tmp_path / "runs" / "tiny" / "svm" / "svm-gln" / "result.json").read_text())
    assert run.data.metrics["svm-gln.val_error"] == pytest.approx(result["val_error"])
    from mlflow.tracking import MlflowClient

    history = MlflowClient(store).get_metric_history(run.info.run_id, "train_loss")
    metrics = pd.read_csv(tmp_path / "runs" / "tiny" / "gd" / "metrics.csv")
    assert sorted(m.step for m in history) == sorted(metrics["step"])   # the curves, every row once
    # again, and the export afterwards: the same one MLflow run, up to date
    quiet = ok(gb(["train-gd", "cfg.yaml", "-q", "--set", f"tracking.mlflow={uri}"], tmp_path)).stdout.splitlines()
    assert len(quiet) == 1 and "already trained" in quiet[0], quiet
    p = ok(gb(["runs", "export", "mlflow"], tmp_path))
    assert "1 unchanged" in p.stdout, p.stdout
    (again,) = mlflow_runs(store).values()
    assert again.info.run_id == run.info.run_id
    # fit-svm likewise: its programs solved already, the line says where the records went
    p = ok(gb(["fit-svm", "cfg.yaml", "--set", f"tracking.mlflow={uri}"], tmp_path))
    assert "already solved" in p.stdout and "gb runs export mlflow" in p.stdout and "nothing to do" not in p.stdout
    assert [r.info.run_id for r in mlflow_runs(store).values()] == [run.info.run_id]
    # untracked: nothing to do, and no store
    (tmp_path / "runs" / "mlflow.db").unlink()
    p = ok(gb(["train-gd", "cfg.yaml"], tmp_path))
    assert "nothing to do" in p.stdout and not (tmp_path / "runs" / "mlflow.db").exists()


# ------------------------------------------------------------------ item 4 and 7: a sweep's runs, live or exported


SWEEP = {**TINY, "name": "sw", "grid": {"model.hidden_units": [2, 3], "contexts.seed": [1, 2]}, "sweep": {"jobs": 1}}


@pytest.mark.slow
def test_a_sweep_has_one_naming_and_one_parameter_set_live_or_exported(tmp_path):
    pytest.importorskip("mlflow")
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))
    live, exported = f"sqlite:///{tmp_path / 'live.db'}", f"sqlite:///{tmp_path / 'exported.db'}"
    ok(gb(["sweep", "sweep.yaml", "--set", f"tracking.mlflow={live}"], tmp_path))
    p = ok(gb(["runs", "export", "mlflow", "--tracking-uri", exported], tmp_path))
    # item 7: it says what it does first (before the store is opened), then where it ended
    lines = p.stdout.splitlines()
    assert lines[0].startswith(f"exporting to {exported}") and lines[0].endswith(": 5 runs"), p.stdout
    assert lines[-1].startswith(f"exported to {exported}") and "1 sweeps with 4 points" in lines[-1], p.stdout
    # item 8: none of MLflow's own lines
    assert all(line.startswith(("exporting", "exported", "creating the MLflow database")) for line in lines), p.stdout
    a, b = mlflow_runs(live), mlflow_runs(exported)
    names = {"sw", *(f"sw/hidden_units={h},seed={s}" for h in (2, 3) for s in (1, 2))}
    assert set(a) == set(b) == names, (sorted(a), sorted(b))
    for name in names:
        assert a[name].data.params == b[name].data.params, name
    parent = a["sw"].data.params
    assert json.loads(parent["grid.model.hidden_units"]) == [2, 3] and json.loads(parent["grid.contexts.seed"]) == [1, 2]
    assert "model.hidden_units" not in parent and "contexts.seed" not in parent   # the base's value is no point's
    assert parent["dataset.train_size"] == "100" and parent["model.kind"] == "gln"   # what every point shares
    for name in names - {"sw"}:
        h, s = (int(x.split("=")[1]) for x in name.split("/")[1].split(","))
        params = a[name].data.params
        assert (params["model.hidden_units"], params["contexts.seed"]) == (str(h), str(s))
        assert a[name].data.tags["mlflow.parentRunId"] == a["sw"].info.run_id
        assert b[name].data.tags["mlflow.parentRunId"] == b["sw"].info.run_id
    # the sweep run again, every point done, into a third store (as after an untracked sweep): the
    # points are logged from their records under the same names, parameters and parent
    again = f"sqlite:///{tmp_path / 'again.db'}"
    p = ok(gb(["sweep", "sweep.yaml", "--set", f"tracking.mlflow={again}"], tmp_path))
    assert "4 points finished earlier" in p.stdout, p.stdout
    c = mlflow_runs(again)
    assert set(c) == names and all(c[n].data.params == a[n].data.params for n in names), sorted(c)
    assert all(c[n].data.tags["mlflow.parentRunId"] == c["sw"].info.run_id for n in names - {"sw"})


def test_the_export_says_what_it_does_before_it_opens_the_store(tmp_path):
    pytest.importorskip("mlflow")
    from gbcli.config import load_config
    from gbcli.runs.mlflow_export import export
    from gbcli.runs.stages import train_gd

    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({**TINY, "training": {"epochs": 1}}))
    train_gd(load_config(tmp_path / "cfg.yaml"), tmp_path / "runs" / "one", progress=False)
    db = tmp_path / "runs" / "mlflow.db"
    said = []

    def echo(msg: str) -> None:
        said.append((msg, db.exists()))

    export(tmp_path / "runs", echo=echo)
    assert said[0] == (f"exporting to sqlite:///{db} (experiment gb): 1 runs", False), said
    assert said[1] == (f"creating the MLflow database {db} (about 10 s)", False), said   # the longest wait, named
    said.clear()
    export(tmp_path / "runs", echo=echo)   # the store is there: no such line
    assert not any("creating" in msg for msg, _ in said) and "1 unchanged" in said[-1][0], said
    assert said[-1][0].startswith(f"exported to sqlite:///{db}") and said[-1][1], said
