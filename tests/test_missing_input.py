"""Missing input (a data set's files) is one line naming what to set, exit 2, nothing written: never a
result row (issue 49, item 5). Every command that loads data, with GB_DATA_DIR pointing at an empty
folder and HOME at an empty one (gb's default data folder is under HOME)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

import forked_gb
from gbcli.data import sources
from gbcli.errors import GbError, MissingInput

REPO = Path(__file__).resolve().parents[1]
MNIST = {"name": "missing-data", "dataset": {"name": "mnist", "train_size": 20, "val_size": 20},
         "model": {"kind": "gln", "hidden_units": 2}, "contexts": {"count": 2, "seed": 1},
         "training": {"epochs": 2}, "svm": {"objectives": ["svm-l2"]}}


@pytest.fixture
def nowhere(tmp_path) -> dict:
    """An environment whose data folder and home are empty folders."""
    (tmp_path / "data").mkdir()
    (tmp_path / "home").mkdir()
    return {**os.environ, "GB_DATA_DIR": str(tmp_path / "data"), "HOME": str(tmp_path / "home")}


def gb(cwd, env, *args):
    return forked_gb.run(args, cwd, env, argv0=forked_gb.CLI, timeout=600)


def assert_missing_line(proc, data: Path) -> None:
    """Exit 2, and one error line that names the data folder, GB_DATA_DIR and the fetch command."""
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("gb: error:")]
    assert len(errors) == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"MNIST not found in {data / 'mnist'}" in errors[0]
    assert "set GB_DATA_DIR" in errors[0] and "`gb data fetch mnist`" in errors[0]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_the_data_layer_raises_its_own_type(tmp_path):
    with pytest.raises(MissingInput) as err:
        sources.load_dataset("mnist", train_size=10, val_size=10, data_dir=tmp_path)
    assert isinstance(err.value, GbError)   # the CLI's one line and exit 2
    assert "\n" not in str(err.value) and f"MNIST not found in {tmp_path / 'mnist'}" in str(err.value)


def test_verify_stops_at_once_instead_of_a_row_per_result(tmp_path, nowhere):
    """Before: 1,152 rows of NO, each `missing ...mnist...`, then "0 of 1152 verified", exit 1."""
    target = REPO / "results" / "paper" / "fig2"
    if not (target / "solutions").is_dir():
        pytest.skip("results/paper/fig2 carries no solutions in this checkout")
    proc = gb(tmp_path, nowhere, "verify", str(target))
    assert_missing_line(proc, Path(nowhere["GB_DATA_DIR"]))
    assert "verified" not in proc.stdout and " NO " not in proc.stdout and "│" not in proc.stdout
    as_json = gb(tmp_path, nowhere, "verify", str(target), "--format", "json")
    assert_missing_line(as_json, Path(nowhere["GB_DATA_DIR"]))
    assert as_json.stdout == ""   # no rows, not even an empty list


@pytest.mark.parametrize("command", ["train-gd", "fit-svm", "sweep"])
def test_commands_that_load_data_refuse_in_one_line_and_write_nothing(tmp_path, nowhere, command):
    config = tmp_path / "mnist.yaml"
    body = dict(MNIST, grid={"contexts.seed": [1, 2]}) if command == "sweep" else MNIST
    config.write_text(yaml.safe_dump(body))
    proc = gb(tmp_path, nowhere, command, str(config), "--out", str(tmp_path / "out"))
    assert_missing_line(proc, Path(nowhere["GB_DATA_DIR"]))
    assert not (tmp_path / "out").exists()
