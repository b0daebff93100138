"""Issue 34 on the surfaces around the run directory, each reproduced with the real thing: a tree
1,500 folders deep inside a received run, a symlink loop as the data folder, a table holding 1e308,
a huge context count for the estimator, and the MLflow export's names, paths, URIs and a half-written
export (a real SQLite MLflow store)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gbcli.programs.estimators import GroupNormSVM
import forked_gb

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow   # subprocesses of gb (about a minute)


def gb(*args, cwd, env=None, timeout=300):
    return forked_gb.run(args, cwd, {**os.environ, **(env or {})}, timeout=timeout, argv0=forked_gb.CLI)


def one_line_refusal(p, *words):
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gb: error: "), p.stderr
    for w in words:
        assert w in err[0], err[0]


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    """The quickstart run, trained, solved and compared, in runs/q of a fresh folder."""
    work = tmp_path_factory.mktemp("surfaces")
    for cmd in ("train-gd", "fit-svm"):
        p = gb(cmd, ROOT / "configs" / "quickstart.yaml", "-q", "--out", "runs/q", cwd=work)
        assert p.returncode == 0, p.stdout + p.stderr
    assert gb("compare", "runs/q", cwd=work).returncode == 0
    return work


def copy_run(solved: Path, name: str) -> Path:
    target = solved / name
    shutil.copytree(solved / "runs" / "q", target, symlinks=True)
    return target


def test_a_tree_1500_folders_deep_inside_a_run_is_one_line_not_a_traceback(solved):
    # outside pytest's basetemp: its cleanup (shutil.rmtree) recurses and would fail on this tree
    scratch = Path(tempfile.mkdtemp(prefix="gb-deep-"))
    run = scratch / "deeproot" / "deep"
    shutil.copytree(solved / "runs" / "q", run)
    here = os.getcwd()
    os.chdir(run / "gd")
    try:
        for _ in range(1500):   # os.makedirs would recurse
            os.mkdir("a")
            os.chdir("a")
    finally:
        os.chdir(here)
    try:
        for args in (("compare", run), ("fit-svm", ROOT / "configs" / "quickstart.yaml", "--out", run, "--force"),
                     ("runs", "export", "mlflow", "--dir", run.parent), ("verify", run), ("plot", run)):
            p = gb(*args, cwd=solved)
            if args[0] in ("verify", "runs"):   # they read records, never the whole tree: they work or say why
                assert "Traceback" not in p.stderr, p.stderr[-2000:]
            else:
                one_line_refusal(p, "more than 64 deep")
        assert (run / "svm" / "svm-gln" / "result.json").is_file()   # --force removed nothing
    finally:
        subprocess.run(["rm", "-rf", str(scratch)], check=True)   # GNU rm walks deep trees without recursion


def test_a_symlink_loop_as_the_data_folder_is_one_line(solved, tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    cfg = tmp_path / "m.yaml"
    cfg.write_text("dataset: {name: mnist, train_size: 100, val_size: 100}\n")
    p = gb("train-gd", cfg, "-q", "--out", "run", cwd=tmp_path, env={"GB_DATA_DIR": str(loop)})
    one_line_refusal(p, "not a usable data folder")
    assert not (tmp_path / "run").exists()
    one_line_refusal(gb("data", "verify", "mnist", cwd=tmp_path, env={"GB_DATA_DIR": str(loop)}),
                     "GB_DATA_DIR", "loop")   # named, with the variable it came from


@pytest.mark.parametrize("column,value", [("train_error", 1.7e308), ("val_error", -0.5), ("objective", "inf")])
def test_gb_plot_refuses_a_table_with_impossible_numbers_before_drawing(solved, column, value):
    """A folder of tables (results, a copy) is drawn from its tables: impossible numbers are refused.
    A run's panels are computed from its records, as `gb compare` computes them: the same damaged
    table in a run is not what gets drawn."""
    run = copy_run(solved, f"plot-{column}")
    table = pd.read_csv(run / "tables" / "errors.csv")
    table[column] = table[column].astype(object)
    table.loc[0, column] = value
    table.to_csv(run / "tables" / "errors.csv", index=False)
    shutil.rmtree(run / "figures", ignore_errors=True)
    folder = solved / f"tables-{column}"
    shutil.copytree(run / "tables", folder / "tables")
    one_line_refusal(gb("plot", folder, cwd=solved), "errors.csv", column)
    assert not (folder / "figures").exists()
    p = gb("plot", run, cwd=solved)
    assert p.returncode == 0 and (run / "figures" / "panels.png").is_file(), p.stdout + p.stderr


def test_gb_plot_draws_the_untouched_tables(solved):
    run = copy_run(solved, "plot-ok")
    p = gb("plot", run, cwd=solved)
    assert p.returncode == 0, p.stderr
    assert (run / "figures" / "panels.png").is_file()


def test_a_huge_context_count_is_refused_before_allocating():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3))
    y = np.where(X[:, 0] > 0, 1, -1)
    contexts = rng.integers(0, 2, size=(20, 4))
    with pytest.raises(ValueError, match="count=1099511627776"):
        GroupNormSVM(count=2 ** 40).fit(X, y, contexts=contexts)
    assert GroupNormSVM(count=3).fit(X, y, contexts=contexts).status_ in ("optimal", "inaccurate")


@pytest.mark.parametrize("flag", ["train-gd", "fit-svm"])
def test_threads_flag_is_bounded(tmp_path, flag):
    p = gb(flag, ROOT / "configs" / "quickstart.yaml", "--threads", "1000000", "--out", "run", cwd=tmp_path)
    assert p.returncode == 2 and "--threads" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ the MLflow export


@pytest.mark.parametrize("name", ["../../x", "/tmp/abs-experiment", "", "a\nb", "..", "x/../../y"])
def test_an_experiment_name_is_a_name_not_a_path(solved, tmp_path, name):
    shutil.copytree(solved / "runs" / "q", tmp_path / "runs" / "q")
    before = sorted(p.name for p in tmp_path.parent.iterdir())
    one_line_refusal(gb("runs", "export", "mlflow", "--experiment", name, cwd=tmp_path), "--experiment")
    assert sorted(p.name for p in tmp_path.parent.iterdir()) == before
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["q"]   # no store, no artifacts
    assert not Path("/tmp/abs-experiment").exists()


def test_a_dir_that_a_sqlite_uri_cannot_carry_is_refused(solved, tmp_path):
    odd = tmp_path / "q?x"
    shutil.copytree(solved / "runs" / "q", odd / "q")
    one_line_refusal(gb("runs", "export", "mlflow", "--dir", odd, cwd=tmp_path), "--dir", "'?'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q?x"]   # nothing landed at the cut path `q`
    assert sorted(p.name for p in odd.iterdir()) == ["q"]


@pytest.mark.parametrize("uri", ["foo://bar", "http://127.0.0.1:9/", "./a-file-store"])
def test_a_tracking_uri_that_does_not_work_is_one_line(solved, tmp_path, uri):
    shutil.copytree(solved / "runs" / "q", tmp_path / "runs" / "q")
    p = gb("runs", "export", "mlflow", "--tracking-uri", uri, cwd=tmp_path, timeout=120)   # MLflow alone retries for minutes
    one_line_refusal(p, uri)


def test_a_half_written_export_is_taken_up_again(solved, tmp_path):
    """A run left by an export that stopped partway (RUNNING, parameters only, no `gb.exported`) is
    replaced on the next export, not called unchanged."""
    mlflow = pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from gbcli.runs.tracking import fingerprint as _fingerprint

    runs = tmp_path / "runs"
    shutil.copytree(solved / "runs" / "q", runs / "q")
    uri = f"sqlite:///{(runs / 'mlflow.db').resolve()}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("gb", artifact_location=(runs / "mlflow-artifacts" / "gb").resolve().as_uri())
    path = str((runs / "q").resolve())
    half = client.create_run(exp, run_name="q", tags={"gb.path": path, "gb.fingerprint": _fingerprint(runs / "q"),
                                                      "gb.path_id": hashlib.sha256(path.encode()).hexdigest()[:16]})
    client.log_param(half.info.run_id, "model.kind", "gln")
    p = gb("runs", "export", "mlflow", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "1 runs" in p.stdout and "0 unchanged" in p.stdout, p.stdout
    live = client.search_runs([exp])
    assert len(live) == 1 and live[0].info.run_id != half.info.run_id
    assert live[0].info.status == "FINISHED" and live[0].data.tags.get("gb.exported") == "yes"
    again = gb("runs", "export", "mlflow", cwd=tmp_path)
    assert "1 unchanged" in again.stdout, again.stdout
    assert len(client.search_runs([exp])) == 1
    assert mlflow is not None


@pytest.mark.parametrize("link", ["mlflow.db", "mlflow-artifacts"])
def test_the_mlflow_store_in_dir_is_never_written_through_a_link(solved, tmp_path, link):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "db" if link == "mlflow.db" else elsewhere
    shutil.copytree(solved / "runs" / "q", tmp_path / "runs" / "q")
    (tmp_path / "runs" / link).symlink_to(target)
    one_line_refusal(gb("runs", "export", "mlflow", cwd=tmp_path), link, "symlink")
    assert list(elsewhere.iterdir()) == []


def test_a_changed_run_replaces_its_mlflow_run_with_real_times(solved, tmp_path):
    """Issue 35: an exported run carries the times its records say (not the export's, not 1970), and
    a re-export after the run changed leaves one MLflow run for it, not a second one."""
    pytest.importorskip("mlflow")
    import datetime as dt
    import json

    from mlflow.tracking import MlflowClient

    runs = tmp_path / "runs"
    shutil.copytree(solved / "runs" / "q", runs / "q")
    assert gb("runs", "export", "mlflow", cwd=tmp_path).returncode == 0
    client = MlflowClient(tracking_uri=f"sqlite:///{(runs / 'mlflow.db').resolve()}")
    exp = client.get_experiment_by_name("gb").experiment_id
    (first,) = client.search_runs([exp])
    prov = json.loads((runs / "q" / "gd" / "summary.json").read_text())["provenance"]
    started = dt.datetime.fromisoformat(prov["started"]).timestamp() * 1000
    assert first.info.start_time == pytest.approx(started, abs=1000)
    assert first.info.end_time >= first.info.start_time
    history = client.get_metric_history(first.info.run_id, "train_loss")
    ended = dt.datetime.fromisoformat(prov["ended"]).timestamp() * 1000
    assert all(started - 1000 <= m.timestamp <= ended + 1000 for m in history)
    assert history[0].timestamp < history[-1].timestamp or ended - started < 1000
    p = gb("fit-svm", ROOT / "configs" / "quickstart.yaml", "-q", "--out", runs / "q", "--force", "--objective", "svm-gln",
           cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    again = gb("runs", "export", "mlflow", cwd=tmp_path)
    assert again.returncode == 0 and "1 runs" in again.stdout, again.stdout + again.stderr
    live = client.search_runs([exp])
    assert len(live) == 1 and live[0].info.run_id != first.info.run_id, live


def _mlflow_runs(root: Path, deleted: bool = False) -> list:
    """The MLflow runs of experiment `gb` in the SQLite store gb made in `root` (deleted ones too)."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{(root / 'mlflow.db').resolve()}")
    exp = client.get_experiment_by_name("gb").experiment_id
    return client.search_runs([exp], run_view_type=ViewType.ALL if deleted else ViewType.ACTIVE_ONLY)


def test_a_config_key_mlflow_refuses_is_one_line_before_the_store_is_touched(solved, tmp_path):
    """A parameter name MLflow refuses would stop the export partway (a run half logged): it is
    refused first, naming the directory and the key, and no store is created. A sweep cannot make such
    a key any more (explicit `model.weights` under a name the network has not are refused before any
    point runs, nothing written); a run's edited record can hold one."""
    pytest.importorskip("mlflow")
    cfg = tmp_path / "d.yaml"
    cfg.write_text("name: d\ndataset: {name: points, x: [[1.0, 2.0]], y: [1]}\n"
                   "model: {kind: diagonal, depth: 2, activation: linear, weights: {w: [[1.0, 0.0], [1.0, 0.0]], 'w?': 1}}\n"
                   "training: {epochs: 2}\ngrid: {training.lr: [0.1]}\n")
    one_line_refusal(gb("sweep", cfg, "-q", "--out", "runs/s", cwd=tmp_path), "model.weights.w?", "not a parameter")
    assert not (tmp_path / "runs").exists()
    edited = tmp_path / "edited"
    run = edited / "q"
    shutil.copytree(solved / "runs" / "q", run)
    with open(run / "gd" / "config.yaml", "a") as f:
        f.write(f"{'k' * 300}: 1\n")   # longer than MLflow's 250 characters
    one_line_refusal(gb("runs", "export", "mlflow", "--dir", edited, cwd=tmp_path), str(run), "kkkk", "250")
    assert sorted(x.name for x in edited.iterdir()) == ["q"]


@pytest.mark.parametrize("damage", ["empty-step-cell", "text-step", "no-step-column"])
def test_a_metrics_row_without_a_step_leaves_only_that_row_out(solved, tmp_path, damage):
    """A row of gd/metrics.csv without a usable step cannot be placed on a curve: the export leaves
    that row out and exports the rest (exit 0, no traceback). Without a step column the rows in
    order are the steps."""
    pytest.importorskip("mlflow")
    runs = tmp_path / "runs"
    shutil.copytree(solved / "runs" / "q", runs / "q")
    metrics = runs / "q" / "gd" / "metrics.csv"
    table = pd.read_csv(metrics)
    steps = [int(s) for s in table["step"]]
    if damage == "no-step-column":
        table = table.drop(columns="step")
        want = list(range(len(steps)))
    else:
        table["step"] = table["step"].astype(object)
        table.loc[1, "step"] = "" if damage == "empty-step-cell" else "later"
        want = steps[:1] + steps[2:]
    table.to_csv(metrics, index=False)
    p = gb("runs", "export", "mlflow", cwd=tmp_path)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stdout + p.stderr
    from mlflow.tracking import MlflowClient

    (run,) = _mlflow_runs(runs)
    history = MlflowClient(tracking_uri=f"sqlite:///{(runs / 'mlflow.db').resolve()}").get_metric_history(
        run.info.run_id, "train_loss")
    assert sorted(m.step for m in history) == want
    assert run.data.tags.get("gb.exported") == "yes" and "svm-gln.objective" in run.data.metrics


def test_a_full_disk_during_an_export_is_one_line_and_the_next_export_replaces_the_half_written_run(solved):
    """A real 4 MB tmpfs as DIR, filled to 64 KB short: the export's SQLite writes hit ENOSPC after
    the MLflow run was created. One line, exit 2; once space is freed, the next export replaces the
    half-written MLflow run (deleted, not a second live run next to the finished one)."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = Path(tempfile.mkdtemp(prefix="gb-full-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if mounted.returncode != 0:
        os.rmdir(mnt)
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        shutil.copytree(solved / "runs" / "q", mnt / "q")
        # the store and its experiment first (~1 MB of MLflow's tables), as a first export makes them
        client = MlflowClient(tracking_uri=f"sqlite:///{mnt / 'mlflow.db'}")
        client.create_experiment("gb", artifact_location=(mnt / "mlflow-artifacts" / "gb").as_uri())
        st = os.statvfs(mnt)
        # 64 KB left: enough to create the MLflow run (and its parameters), not its curves (found by
        # trying 8-160 KB with MLflow 3; below ~32 KB the run itself is not created)
        (mnt / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize - 64 * 1024))
        p = gb("runs", "export", "mlflow", "--dir", mnt, cwd=mnt.parent)
        one_line_refusal(p, "mlflow.db", "disk is full")
        half = _mlflow_runs(mnt, deleted=True)
        assert half and all(r.data.tags.get("gb.exported") != "yes" for r in half), \
            "no half-written MLflow run: the disk filled at another point (adjust the space left)"
        (mnt / "filler").unlink()
        again = gb("runs", "export", "mlflow", "--dir", mnt, cwd=mnt.parent)
        assert again.returncode == 0 and "1 runs" in again.stdout, again.stdout + again.stderr
        (live,) = _mlflow_runs(mnt)
        assert live.info.run_id not in {r.info.run_id for r in half}
        assert live.info.status == "FINISHED" and live.data.tags.get("gb.exported") == "yes"
        assert {r.info.lifecycle_stage for r in _mlflow_runs(mnt, deleted=True) if r.info.run_id != live.info.run_id} \
            == {"deleted"}
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)   # the test's own SQLite connection
        os.rmdir(mnt)
