"""The store's typed records (GdRecord, ProgramRecord, SweepRecord) and views (RunView, SweepView):
the bytes gb writes, the status computed from a record's own numbers, and received files refused as
the safe readers refuse them."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from gbcli.fs.layout import RunDir, SweepDir
from gbcli.fs.safe import write_json
from gbcli.store.records import GdRecord, ProgramRecord, SweepRecord
from gbcli.store.views import RunView, SweepView

GD = {"predictor": "gd-gln", "status": "ok", "train_loss": 0.1, "train_error": 0.0, "val_error": 0.2,
      "manifest": {"config": "c1", "problem": "p1"}}
CONFIG = "model:\n  kind: gln\ntraining:\n  lr: 0.5\n"


def _run(root, gd=GD, programs=()):
    run = RunDir(root)
    run.gd.mkdir(parents=True)
    GdRecord(run.summary, dict(gd)).write()
    run.gd_config.write_text(CONFIG)
    for name, rec in programs:
        run.program(name).mkdir(parents=True)
        ProgramRecord(run.result(name), rec).write()
    return RunView(root)


def test_a_record_writes_the_bytes_of_write_json_and_reads_back(tmp_path):
    view = _run(tmp_path / "run")
    write_json(tmp_path / "plain.json", GD)
    assert view.dir.summary.read_bytes() == (tmp_path / "plain.json").read_bytes()
    rec = view.gd()
    assert rec.fields == GD and rec["predictor"] == "gd-gln" and rec.status == "ok"
    assert rec.manifest == {"config": "c1", "problem": "p1"}
    assert view.config() == {"model": {"kind": "gln"}, "training": {"lr": 0.5}} == view.any_config()


def test_a_status_is_computed_from_the_records_numbers_never_taken(tmp_path):
    forged = {"status": "optimal", "certified": False, "objective": 1.0}
    view = _run(tmp_path / "run", gd={**GD, "train_loss": math.nan}, programs=[("svm-l2", forged)])
    assert view.gd().status == "diverged"
    assert view.programs()["svm-l2"].status == "inaccurate"
    assert view.programs()["svm-l2"].manifest is None


def test_received_files_read_as_none_leniently_and_raise_strictly(tmp_path):
    view = _run(tmp_path / "run", programs=[("svm-l2", {"status": "optimal"})])
    view.dir.result("svm-l2").unlink()
    view.dir.result("svm-l2").symlink_to(view.dir.summary)
    assert view.programs() == {}   # a link is never read
    with pytest.raises(OSError):
        ProgramRecord.read(view.dir.result("svm-l2"), strict=True)
    view.dir.gd_config.write_text("a: &x [1]\nb: *x\n")   # an alias: not a config gb wrote
    assert view.config() is None
    with pytest.raises(yaml.YAMLError):
        view.config(strict=True)
    assert view.any_config() is None
    assert GdRecord.read(tmp_path / "missing.json") is None


def test_a_sweep_view_gives_its_config_record_and_points(tmp_path):
    sweep = SweepDir(tmp_path / "sweep")
    _run(sweep.point("p2").root)
    _run(sweep.point("p1").root)
    sweep.point("p3").gd.mkdir(parents=True)   # not trained: no summary
    sweep.config.write_text("grid:\n  model.hidden_units: [1, 2]\n")
    SweepRecord(sweep.record, {"name": "s", "points": 3}).write()
    view = SweepView(sweep.root)
    assert list(view.points()) == ["p1", "p2"] and view.points()["p1"].root == sweep.point("p1").root
    assert view.point("p3").gd() is None
    assert view.config() == {"grid": {"model.hidden_units": [1, 2]}}
    assert view.record().points == 3 and json.loads(sweep.record.read_text()) == {"name": "s", "points": 3}
    SweepRecord(sweep.record, {"points": "3"}).write()
    assert view.record().points is None   # a count that is not a number is none


@pytest.mark.parametrize("text", ["- a\n- b\n", "a: [\n", "\xff\xfe"])
def test_load_run_refuses_a_stored_config_that_is_not_a_mapping_in_one_line(tmp_path, text):
    """A run's stored config is received data: a list, broken YAML or bytes that are not UTF-8 give
    GbError naming the file (the CLI prints one line), never a ValueError or a YAML traceback."""
    from gbcli.errors import GbError
    from gbcli.runs.load import load_run
    from gbcli.store.lock import write_marker

    view = _run(tmp_path / "run")
    write_marker(view.dir.root, "run")
    view.dir.gd_config.write_bytes(text.encode("latin-1"))
    with pytest.raises(GbError, match="gd/config.yaml"):
        load_run(view.dir.root)


def test_runs_show_gives_the_computed_statuses_not_the_records_words(tmp_path):
    from gbcli.runs.index import show

    forged = {"status": "optimal", "certified": False, "objective": 1.0}
    _run(tmp_path / "run", gd={**GD, "train_loss": math.nan}, programs=[("svm-l2", forged)])
    results = show(tmp_path / "run")["results"]
    assert results["svm-l2"]["status"] == "inaccurate" and results["gd"]["status"] == "diverged", results
