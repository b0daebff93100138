"""In-process twins of the end-to-end run-index, MLflow and CLI tests, for `make test-fast`: the
run index (`gbcli.runs.index`), the MLflow export (`gbcli.runs.mlflow_export`) and the `gb`
command's own code (`gbcli.cli`, through Typer's test runner) on one tiny digits run, so the fast
loop exercises every module. The subprocess versions (`test_runs_index.py`, `test_cli_errors.py`,
`test_hostile.py`) stay the real check of what a user sees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gbcli.cli import app
from gbcli.config import load_config
from gbcli.errors import GbError
from gbcli.runs import index
from gbcli.runs.compare import compare_run
from gbcli.runs.stages import fit_svm, train_gd

TINY = {"name": "fast", "dataset": {"name": "digits", "train_size": 100, "val_size": 200},
        "model": {"kind": "gln", "hidden_units": 2}, "training": {"epochs": 2}, "svm": {"objectives": ["svm-gln"]}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """runs/a: trained, solved and compared; runs/b: trained only, with momentum 0.9."""
    root = tmp_path_factory.mktemp("fast") / "runs"
    cfg_path = root.parent / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(TINY))
    a = load_config(cfg_path)
    train_gd(a, root / "a", progress=False)
    fit_svm(a, root / "a", None, progress=False)
    compare_run(root / "a")
    train_gd(load_config(cfg_path, ("training.momentum=0.9",)), root / "b", progress=False)
    return root


def test_the_index_computes_statuses_and_filters(runs):
    infos = {i.path.name: i for i in index.scan(runs)}
    assert infos["a"].status == "complete" and infos["b"].status == "trained"
    assert infos["a"].stages == {"gd": "ok", "svm-gln": "optimal"}
    assert [i.path.name for i in index.scan(runs, {"training.momentum": "0.9"})] == ["b"]
    with pytest.raises(GbError, match="--where training.momentun"):
        index.scan(runs, {"training.momentun": "0.9"})
    rows = index.diff(runs / "a", runs / "b")
    assert [r["key"] for r in rows if r["what"] == "config"] == ["training.momentum"]
    shown = index.show(runs / "a")
    assert shown["provenance"]["gd"]["command"] and shown["results"]["svm-gln"]["status"] == "optimal"


def test_the_cli_code_in_process(runs):
    """`gb` through Typer's runner: what the commands print, and refusals as GbError (the
    entry point `main` turns them into one line; the subprocess tests check that line)."""
    cli = CliRunner()
    version = cli.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.stdout.startswith("gb ")
    listed = cli.invoke(app, ["runs", "--dir", str(runs), "--format", "json"])
    assert listed.exit_code == 0, listed.output
    assert {r["run"]: r["status"] for r in json.loads(listed.stdout)} == {"a": "complete", "b": "trained"}
    shown = cli.invoke(app, ["runs", "show", str(runs / "a"), "--format", "json"])
    assert json.loads(shown.stdout)["kind"] == "run"
    diffed = cli.invoke(app, ["runs", "diff", str(runs / "a"), str(runs / "b"), "--format", "csv"])
    assert "training.momentum" in diffed.stdout
    keys = cli.invoke(app, ["config", "keys", "training.lr", "--format", "json"])
    assert json.loads(keys.stdout)[0]["description"]
    refused = cli.invoke(app, ["runs", "show", str(runs / "a"), "--format", "csv"])
    assert isinstance(refused.exception, GbError) and "csv" in str(refused.exception)


def test_the_mlflow_export_in_process(runs, tmp_path):
    mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install 'gbcli[mlflow]')")
    from gbcli.runs.mlflow_export import export

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    export(runs, tracking_uri=uri, echo=lambda msg: None)
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    found = client.search_runs([client.get_experiment_by_name("gb").experiment_id])
    by_name = {r.info.run_name: r for r in found}
    assert set(by_name) == {"a", "b"}
    assert by_name["b"].data.params["training.momentum"] == "0.9"
    assert by_name["a"].data.tags["gb.stage.svm-gln"] == "optimal"
