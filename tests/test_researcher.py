"""A researcher's day (issue 35, the parts built): `gb sweep --dry-run`, readable point names,
`gbcli.load_run`, and names from files or folders printed as plain, printable text (issue 34)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import gbcli
from gbcli.config import load_config
from gbcli.runs.sweep import expand
from gbcli.store.identity import point_id, readable_names
import forked_gb

ROOT = Path(__file__).resolve().parents[1]
GRID = {"name": "dg", "dataset": {"name": "digits", "train_size": 100, "val_size": 200},
        "model": {"kind": "gln", "hidden_units": 3}, "contexts": {"count": 2},
        "training": {"epochs": 3, "batch_size": 50, "log_points": 2}, "svm": {"objectives": ["svm-gln"]},
        "grid": {"model.hidden_units": [3, 4], "training.momentum": [0.0, 0.9]}, "zip": {"contexts.seed": [1, 2]}}


def gb(*args, cwd):
    return forked_gb.run(args, cwd, timeout=300, argv0=forked_gb.CLI)


def test_a_dry_run_lists_the_points_by_readable_name_and_writes_nothing(tmp_path):
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(GRID))
    p = gb("sweep", "g.yaml", "--dry-run", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "8 points (0 done)" in p.stdout
    _, points = expand(tmp_path / "g.yaml")
    for cfg, name in zip(points, readable_names(points)):
        assert point_id(cfg) in p.stdout and name in p.stdout
    assert sorted(readable_names(points))[0] == "hidden_units=3,seed=1,momentum=0.0"
    assert not (tmp_path / "runs").exists()


def test_readable_names_are_unique_and_say_what_differs():
    base = load_config(ROOT / "configs" / "quickstart.yaml")
    a = base.model_copy(update={"training": base.training.model_copy(update={"batch_seed": 2})})
    b = base.model_copy(update={"training": base.training.model_copy(update={"batch_seed": 3})})
    assert readable_names([a, b]) == ["batch_seed=2", "batch_seed=3"]
    assert readable_names([base]) == [base.name]


@pytest.mark.slow
def test_load_run_gives_the_network_metrics_records_and_tables(tmp_path):
    cfg = ROOT / "configs" / "quickstart.yaml"
    for cmd in ("train-gd", "fit-svm"):
        assert gb(cmd, cfg, "--out", "run", "-q", cwd=tmp_path).returncode == 0
    assert gb("compare", "run", cwd=tmp_path).returncode == 0
    run = gbcli.load_run(tmp_path / "run")
    assert run.summary["status"] == "ok" and run.model is not None
    assert list(run.metrics["step"])[-1] == run.summary["steps"]
    assert set(run.results) == set(run.config.svm.objectives)
    assert all(r["status"] == "optimal" for r in run.results.values())
    assert set(run.errors["predictor"]) == {run.summary["predictor"], *run.results}
    assert len(run.inconsistency) == len(run.results)
    with pytest.raises(gbcli.GbError, match="not a run directory"):
        gbcli.load_run(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["m[/b]", "o[/x]", "clear\x1b[2Jscreen", "title\x1b]0;pwned\x07"])
def test_a_name_from_a_folder_is_printed_as_plain_printable_text(tmp_path, name):
    cfg = ROOT / "configs" / "quickstart.yaml"
    p = gb("train-gd", cfg, "--out", f"runs/{name}", "-q", cwd=tmp_path)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stdout + p.stderr
    listing = gb("runs", cwd=tmp_path)
    assert listing.returncode == 0 and "Traceback" not in listing.stderr, listing.stdout + listing.stderr
    assert "\x1b" not in listing.stdout and "\x07" not in listing.stdout
    shown = gb("runs", "show", f"runs/{name}", cwd=tmp_path)
    assert shown.returncode == 0 and "\x1b" not in shown.stdout, shown.stdout + shown.stderr


def test_the_final_progress_line_shows_the_last_row_of_metrics(tmp_path, caplog):
    """The last progress line names the numbers of the last logged step (it repeated the step
    before's: val_err 0.063 where metrics.csv said 0.061)."""
    import logging

    cfg = load_config(ROOT / "configs" / "quickstart.yaml")
    with caplog.at_level(logging.INFO, logger="gbcli.progress"):
        gbcli.train_gd(cfg, tmp_path / "run", progress=True)
    final = [r.getMessage() for r in caplog.records if r.getMessage().endswith("(done)")]
    last = gbcli.load_run(tmp_path / "run").metrics.iloc[-1]
    assert final and f"step {int(last['step'])}/" in final[-1], final
    assert f"val_err {last['val_error']:.4g}," in final[-1] and f"loss {last['train_loss']:.4g}," in final[-1], final
