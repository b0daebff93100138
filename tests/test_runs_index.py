"""Runs you can find, read and follow (issue 25): provenance in every record, `gb runs` (list, show,
diff), `gb plot` training curves, progress lines and log.txt outside a terminal, and the MLflow
export read back through MLflow's own client. Everything runs the real CLI on tiny digits runs."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml
import forked_gb

pytestmark = pytest.mark.slow   # subprocesses of gb, end to end: `make test-fast` leaves the file out

BASE = {"name": "idx", "dataset": {"name": "digits", "train_size": 100, "val_size": 200},
        "model": {"kind": "gln", "hidden_units": 2}, "training": {"epochs": 3}, "svm": {"objectives": ["svm-gln"]}}


def gb(args, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    p = forked_gb.run(args, cwd, env, timeout=timeout)   # a real process forked from one that has imported gb
    return p


def ok(p: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert p.returncode == 0 and "Traceback" not in p.stderr, f"exit {p.returncode}\n{p.stderr}\n{p.stdout}"
    return p


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """Two runs that differ in one key (H = 2 and H = 3, through --set), each trained, solved, compared;
    and a two-point sweep."""
    w = tmp_path_factory.mktemp("index")
    (w / "cfg.yaml").write_text(yaml.safe_dump(BASE))
    (w / "sweep.yaml").write_text(yaml.safe_dump({**BASE, "name": "sw", "grid": {"contexts.seed": [1, 2]}}))
    for extra in ([], ["--set", "model.hidden_units=3"]):
        for cmd in ("train-gd", "fit-svm"):
            ok(gb([cmd, "cfg.yaml", "-q", *extra], w))
    runs = sorted(p for p in (w / "runs").iterdir() if p.is_dir())
    for r in runs:
        ok(gb(["compare", r.relative_to(w)], w))
    ok(gb(["sweep", "sweep.yaml", "-q"], w))
    return w


def test_every_record_says_how_it_was_made(work):
    run = work / "runs" / "idx"
    import gbcli

    for record in (run / "gd" / "summary.json", run / "svm" / "svm-gln" / "result.json", run / "gb-run.json"):
        prov = json.loads(record.read_text())["provenance"]
        for key in ("gb_version", "python", "numpy", "host", "command", "started", "ended", "wall_seconds",
                    "cpu_seconds", "blas", "pid"):
            assert key in prov, f"{record}: no {key} in {sorted(prov)}"
        assert prov["gb_version"] == gbcli.__version__ != "unknown"
        assert prov["ended"] >= prov["started"] and prov["wall_seconds"] >= 0
        if (Path(gbcli.__file__).parents[1] / ".git").exists():   # run from a checkout: the commit
            assert len(prov["commit"]) == 40 and isinstance(prov["dirty"], bool)
    summary = json.loads((run / "gd" / "summary.json").read_text())["provenance"]
    assert summary["torch"] and summary["torch_threads"] >= 1
    assert "train-gd" in summary["command"] and "cfg.yaml" in summary["command"]
    sweep = json.loads((work / "runs" / "sw" / "sweep.json").read_text())
    assert sweep["points"] == 2 and sweep["failed"] == 0 and "sweep" in sweep["provenance"]["command"]
    point = next((work / "runs" / "sw" / "points").iterdir())
    assert "provenance" in json.loads((point / "gd" / "summary.json").read_text())


def test_runs_lists_newest_first_filters_and_formats(work):
    p = ok(gb(["runs", "--format", "csv"], work))
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    names = [r["run"] for r in rows]
    assert set(names) == {"idx", next(n for n in names if n.startswith("idx-")), "sw"}, names
    assert names[0] == "sw", "the sweep ran last: newest first"
    assert [r["time"] for r in rows] == sorted((r["time"] for r in rows), reverse=True)
    plain = next(r for r in rows if r["run"] == "idx")
    assert plain["kind"] == "run" and plain["status"] == "complete" and plain["model.hidden_units"] == "2"
    assert "svm-gln:optimal" in plain["stages"] and "gd:ok" in plain["stages"]
    assert float(plain["svm-gln.val_error"]) == json.loads(
        (work / "runs" / "idx" / "svm" / "svm-gln" / "result.json").read_text())["val_error"]
    only = json.loads(ok(gb(["runs", "--format", "json", "--where", "model.hidden_units=3"], work)).stdout)
    assert [r["run"] for r in only] == [n for n in names if n.startswith("idx-")]
    sweeps = json.loads(ok(gb(["runs", "-f", "json", "-w", "kind=sweep"], work)).stdout)
    assert [r["run"] for r in sweeps] == ["sw"] and sweeps[0]["stages"] == "done:2"
    assert sweeps[0]["status"] == "complete"
    from gbcli.runs.index import read_sweep   # every point done, but killed before the sweep's tables were written

    cut = work / "cut-sweep"
    shutil.copytree(work / "runs" / "sw", cut)
    (cut / "tables" / "errors.csv").unlink()
    assert read_sweep(cut).status == "unaggregated"
    shutil.rmtree(cut)
    table = ok(gb(["runs"], work)).stdout
    assert "idx" in table and "sw" in table
    typo = gb(["runs", "-w", "model.hidden_unit=3"], work)   # a key no run has: said, not an empty list
    assert typo.returncode == 2 and typo.stderr.startswith("gb: error: --where model.hidden_unit:"), typo.stderr
    assert "csv" in gb(["runs", "show", "runs/idx", "-f", "csv"], work).stderr   # refused, not JSON under csv


def test_a_run_with_only_its_network_is_trained_not_solved(tmp_path):
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({**BASE, "name": "t"}))
    ok(gb(["train-gd", "cfg.yaml", "-q", "--out", "runs/t"], tmp_path))
    rows = json.loads(ok(gb(["runs", "-f", "json"], tmp_path)).stdout)
    assert [(r["run"], r["status"]) for r in rows] == [("t", "trained")], rows


def test_runs_show_and_diff(work):
    shown = json.loads(ok(gb(["runs", "show", "runs/idx", "--format", "json"], work)).stdout)
    assert shown["kind"] == "run" and shown["config"]["model"]["hidden_units"] == 2
    assert shown["results"]["svm-gln"]["status"] == "optimal" and shown["results"]["gd"]["status"] == "ok"
    assert shown["provenance"]["gd"]["command"].count("train-gd") == 1
    text = ok(gb(["runs", "show", "runs/idx"], work)).stdout
    assert "provenance (gd)" in text and "hidden_units: 2" in text
    other = next(p for p in (work / "runs").iterdir() if p.name.startswith("idx-"))
    rows = json.loads(ok(gb(["runs", "diff", "runs/idx", other.relative_to(work), "-f", "json"], work)).stdout)
    config = [r for r in rows if r["what"] == "config"]
    assert [r["key"] for r in config] == ["model.hidden_units"], rows
    assert (config[0]["runs/idx"], config[0][str(other.relative_to(work))]) == ("2", "3")
    assert any(r["what"] == "number" and r["key"] == "svm-gln.objective" for r in rows)
    same = ok(gb(["runs", "diff", "runs/idx", "runs/idx"], work)).stdout
    assert "no difference" in same


def test_runs_computes_statuses_it_can(work, tmp_path):
    """A result.json that claims `optimal` with a gap its own tolerance does not allow is not listed
    as optimal; a program of another problem than the run's network is stale."""
    import shutil

    run = tmp_path / "r"
    shutil.copytree(work / "runs" / "idx", run)
    rec = json.loads((run / "svm" / "svm-gln" / "result.json").read_text())
    rec["rel_gap"] = 0.5
    (run / "svm" / "svm-gln" / "result.json").write_text(json.dumps(rec))
    row = json.loads(ok(gb(["runs", "-d", tmp_path, "-f", "json"], work)).stdout)[0]
    assert "svm-gln:unverified" in row["stages"] and row["status"] != "complete", row
    shown = json.loads(ok(gb(["runs", "show", run, "-f", "json"], work)).stdout)
    assert shown["results"]["svm-gln"]["status"] == "unverified", shown["results"]   # computed, not the word
    rec["rel_gap"] = 1e-9
    (run / "svm" / "svm-gln" / "result.json").write_text(json.dumps(rec))
    summary = json.loads((run / "gd" / "summary.json").read_text())
    summary["manifest"]["problem"] = "0" * 16   # a network of another problem than the program's
    (run / "gd" / "summary.json").write_text(json.dumps(summary))
    row = json.loads(ok(gb(["runs", "-d", tmp_path, "-f", "json"], work)).stdout)[0]
    assert "svm-gln:stale" in row["stages"], row


def test_plot_draws_training_curves(work):
    p = ok(gb(["plot", "runs/idx"], work))
    curves = work / "runs" / "idx" / "figures" / "curves.png"
    assert str(curves.relative_to(work)) in p.stdout and curves.stat().st_size > 10_000
    p = ok(gb(["plot", "runs/sw", "--points"], work))
    assert (work / "runs" / "sw" / "figures" / "curves.png").is_file()
    per_point = list((work / "runs" / "sw" / "points").glob("*/figures/curves.png"))
    assert len(per_point) == 2, p.stdout


def test_progress_lines_and_log_when_output_is_a_file(tmp_path):
    """Output to a file (a Slurm log, nohup): plain progress lines during training, with the step,
    loss and errors; -q gives fewer lines, never more; every run directory has a log.txt."""
    cfg = {**BASE, "name": "p", "training": {"epochs": 40, "batch_size": 10}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    loud = ok(gb(["train-gd", "cfg.yaml", "--out", "loud"], tmp_path)).stdout.splitlines()
    quiet = ok(gb(["train-gd", "cfg.yaml", "--out", "quiet", "-q"], tmp_path)).stdout.splitlines()
    steps = [line for line in loud if "train gd-gln: step " in line]
    assert steps, loud   # every 5 % of the 400 steps or 10 s, never two within 2 s (gbcli.logs), and the last
    assert "loss" in steps[0] and "elapsed" in steps[0] and "nan" not in steps[0]
    assert len(quiet) < len(loud)
    log = (tmp_path / "loud" / "log.txt").read_text()
    assert "train-gd gd-gln" in log and "step " in log
    assert "train-gd gd-gln" in (tmp_path / "quiet" / "log.txt").read_text()


def test_sweep_progress_lines_when_output_is_a_file(tmp_path):
    """A sweep with output to a file: a plain line as points finish (points done of all, failed,
    elapsed, ETA), the last one at 100 %; -q drops them (fewer lines, never more), and names a
    failed point all the same."""
    cfg = {**BASE, "name": "sp", "grid": {"contexts.seed": [1, 2, 3]}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    loud = ok(gb(["sweep", "cfg.yaml", "--out", "loud", "--jobs", "1"], tmp_path)).stdout.splitlines()
    quiet = ok(gb(["sweep", "cfg.yaml", "--out", "quiet", "--jobs", "1", "-q"], tmp_path)).stdout.splitlines()
    lines = [line for line in loud if line.startswith("sweep: ") and " points (" in line]
    assert lines and lines[-1].startswith("sweep: 3/3 points (100%), 0 failed, elapsed"), loud
    assert all("ETA" in line for line in lines[:-1]), lines
    assert not [line for line in quiet if line.startswith("sweep: ") and " points (" in line], quiet
    assert len(quiet) < len(loud)
    for out in ("loud", "quiet"):   # the sweep's own log.txt, beside each point's
        log = (tmp_path / out / "log.txt").read_text()
        assert "3 of 3 points done, 0 failed" in log, log
    bad = {**cfg, "name": "bad", "training": {"lr": 1.0e30}}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    p = gb(["sweep", "bad.yaml", "--out", "bad", "--jobs", "1", "-q"], tmp_path)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert sum("FAILED" in line for line in p.stdout.splitlines()) == 3, p.stdout


def test_mlflow_export_read_back_through_mlflows_client(work, tmp_path):
    mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install 'gbcli[mlflow]')")
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    p = ok(gb(["runs", "export", "mlflow", "--tracking-uri", uri], work, timeout=900))
    assert "2 runs, 1 sweeps with 2 points" in p.stdout, p.stdout
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("gb")
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id], max_results=100)}
    assert set(runs) >= {"idx", "sw"} and len(runs) == 5, sorted(runs)
    idx = runs["idx"]
    assert idx.data.params["model.hidden_units"] == "2" and idx.data.params["dataset.name"] == "digits"
    assert idx.data.tags["gb.stage.svm-gln"] == "optimal" and idx.data.tags["gb.kind"] == "run"
    assert idx.data.tags["gb.provenance.gb_version"]
    result = json.loads((work / "runs" / "idx" / "svm" / "svm-gln" / "result.json").read_text())
    assert idx.data.metrics["svm-gln.val_error"] == pytest.approx(result["val_error"])
    incons = pd.read_csv(work / "runs" / "idx" / "tables" / "inconsistency.csv").set_index("predictor_a")
    assert idx.data.metrics["svm-gln.inconsistency"] == pytest.approx(incons.loc["svm-gln", "inconsistency"])
    assert idx.data.metrics["svm-gln.expected_if_uncorrelated"] == \
        pytest.approx(incons.loc["svm-gln", "expected_if_uncorrelated"])
    history = client.get_metric_history(idx.info.run_id, "train_loss")
    assert len(history) > 2 and history == sorted(history, key=lambda m: m.step)
    artifacts = {a.path for a in client.list_artifacts(idx.info.run_id)} | \
        {a.path for a in client.list_artifacts(idx.info.run_id, "tables")}
    assert "tables/errors.csv" in artifacts and "gb-run.json" in artifacts, artifacts
    children = [r for n, r in runs.items() if n.startswith("sw/")]
    assert len(children) == 2 and all(r.data.tags["mlflow.parentRunId"] == runs["sw"].info.run_id for r in children)
    again = ok(gb(["runs", "export", "mlflow", "--tracking-uri", uri], work, timeout=900))
    assert "5 unchanged" in again.stdout and len(client.search_runs([exp.experiment_id])) == 5
    assert mlflow.__version__


def test_the_inconsistency_is_in_runs_show_and_diff(work, tmp_path):
    """The headline number of the question, read from each run's (and the sweep's mean over its
    points') tables/inconsistency.csv, in every view."""
    listed = {r["run"]: r for r in json.loads(ok(gb(["runs", "--format", "json"], work)).stdout)}
    for name in ("idx", "sw"):
        table = pd.read_csv(work / "runs" / name / "tables" / "inconsistency.csv")
        mean = table[table["predictor_a"] == "svm-gln"][["inconsistency", "expected_if_uncorrelated"]].mean()
        assert listed[name]["svm-gln.inconsistency"] == pytest.approx(mean["inconsistency"], abs=1e-6)
        assert listed[name]["svm-gln.expected_if_uncorrelated"] == pytest.approx(mean["expected_if_uncorrelated"], abs=1e-6)
    terminal = ok(gb(["runs"], work)).stdout
    assert "inconsistency" in terminal and "2p(1-p)" in terminal and f"svm-gln {listed['idx']['svm-gln.inconsistency']:.4f}" \
        in terminal
    shown = json.loads(ok(gb(["runs", "show", "runs/idx", "--format", "json"], work)).stdout)
    assert shown["results"]["svm-gln"]["inconsistency"] == pytest.approx(listed["idx"]["svm-gln.inconsistency"])
    other = next(r for r in listed if r.startswith("idx") and r != "idx")
    rows = json.loads(ok(gb(["runs", "diff", "runs/idx", f"runs/{other}", "--format", "json"], work)).stdout)
    keys = {r["key"] for r in rows if r["what"] == "number"}
    if listed["idx"]["svm-gln.inconsistency"] != listed[other]["svm-gln.inconsistency"]:
        assert "svm-gln.inconsistency" in keys, rows
    copy = tmp_path / "runs" / "copy"
    shutil.copytree(work / "runs" / "idx", copy)
    table = pd.read_csv(copy / "tables" / "inconsistency.csv")
    table.loc[table["predictor_a"] == "svm-gln", "inconsistency"] = 0.5
    table.to_csv(copy / "tables" / "inconsistency.csv", index=False)
    rows = json.loads(ok(gb(["runs", "diff", work / "runs" / "idx", copy, "--format", "json"], tmp_path)).stdout)
    assert [r for r in rows if r["key"] == "svm-gln.inconsistency"][0][str(copy)] == "0.5", rows


def test_commands_accept_the_names_gb_runs_prints(work):
    listed = [r["run"] for r in json.loads(ok(gb(["runs", "--format", "json"], work)).stdout)]
    assert "idx" in listed and not (work / "idx").exists()   # a name under runs/, not a path here
    shown = json.loads(ok(gb(["runs", "show", "idx", "--format", "json"], work)).stdout)
    assert shown["path"] == str(Path("runs") / "idx") and shown["status"] == "complete"
    other = next(r for r in listed if r.startswith("idx") and r != "idx")
    rows = json.loads(ok(gb(["runs", "diff", "idx", other, "--format", "json"], work)).stdout)
    assert any(r["key"] == "model.hidden_units" for r in rows), rows
    assert "tables -> runs/idx/tables" in ok(gb(["compare", "idx"], work)).stdout
    assert "verified (trained networks and programs" in ok(gb(["verify", "idx"], work)).stdout
    missing = gb(["runs", "show", "no-such-run"], work)
    assert missing.returncode == 2 and missing.stderr.strip() == (
        "gb: error: RUN: no-such-run: no such run directory, nor a run or sweep named so under runs (`gb runs` "
        "lists them; a sweep's point: SWEEP/NAME)")


def test_names_tags_and_notes_are_stored_shown_and_exported(tmp_path):
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(BASE))
    ok(gb(["train-gd", "cfg.yaml", "-q", "--name", "H=2 baseline", "--tag", "group=a", "--tag", "try=1",
           "--note", "the first of three"], tmp_path))
    ok(gb(["fit-svm", "cfg.yaml", "-q", "--tag", "try=2"], tmp_path))   # tags merge; the name stays
    (row,) = json.loads(ok(gb(["runs", "--format", "json"], tmp_path)).stdout)
    assert row["name"] == "H=2 baseline" and row["tags"] == "group=a,try=2"
    assert "idx (H=2 baseline)" in ok(gb(["runs"], tmp_path)).stdout
    shown = json.loads(ok(gb(["runs", "show", "idx", "--format", "json"], tmp_path)).stdout)
    assert shown["labels"] == {"name": "H=2 baseline", "tags": {"group": "a", "try": "2"}, "note": "the first of three"}
    for bad, flag in ((["--tag", "novalue"], "--tag"), (["--name", "a\x1b[2Jb"], "--name"), (["--note", ""], "--note")):
        p = gb(["train-gd", "cfg.yaml", "-q", "--out", "runs/other", *bad], tmp_path)
        assert p.returncode == 2 and p.stderr.startswith(f"gb: error: {flag}:") and len(p.stderr.splitlines()) == 1
        assert not (tmp_path / "runs" / "other").exists()
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    ok(gb(["runs", "export", "mlflow"], tmp_path))
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("gb").experiment_id])
    assert run.info.run_name == "H=2 baseline" and run.data.tags["gb.tag.group"] == "a"
    assert run.data.tags["mlflow.note.content"] == "the first of three"
    # a labels.json that is not gb's: no labels, no refusal
    (tmp_path / "runs" / "idx" / "labels.json").write_text('{"name": ["x"], "tags": {"a": {"b": 1}}}')
    (row,) = json.loads(ok(gb(["runs", "--format", "json"], tmp_path)).stdout)
    assert "name" not in row and "tags" not in row and row["status"] == "solved"
