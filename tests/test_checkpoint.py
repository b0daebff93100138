"""Training checkpoints (gd/checkpoint.pt) and bit-identical resume.

A run interrupted at any step and resumed ends with the very weights, metrics.csv and predictions of
a run never interrupted: in the library (an interrupt injected at a chosen step; SGD with momentum,
Adam, FReLU's gates that freeze mid-run, a sweep group trained as one computation), and as a
process (`gb train-gd` stopped by SIGTERM, or killed by SIGKILL after a periodic checkpoint). A
checkpoint that is not this run's (truncated, another config, a pickle payload, a symlink, tensors
of the wrong shape) is never unpickled or followed: the run starts from step 0 and still ends right,
or (a symlink) is refused with one line.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from gbcli import interrupts, logs
from gbcli.config import load_config
from gbcli.errors import GbError
from gbcli.store.identity import gd_manifest
from gbcli.runs.stages import load_checkpoint, train_gd, train_gd_group
from gbcli.training.loop import MetricLog

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "quickstart.yaml"
GB = (sys.executable, "-c", "from gbcli.cli import main; main()")
# 12 epochs of 4 minibatches (500 digits, batch 128), every step logged: 48 steps, under a second
SHORT = ["training.epochs=12", "training.lr_milestones=[6]", "training.checkpoint_seconds=0.01"]
OPTIMIZERS = {"momentum": ["training.momentum=0.9"], "adam": ["training.optimizer=adam", "training.lr=0.002"]}


@pytest.fixture(autouse=True)
def one_thread():
    """Bit-identity holds for one thread count: the tests compare runs made with the same."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def config(*sets: str):
    return load_config(QUICKSTART, [*SHORT, *sets])


def outputs(run: Path) -> tuple[dict, str, dict]:
    """The weights, metrics.csv and predictions of a finished run."""
    gd = Path(run) / "gd"
    weights = load_checkpoint(gd / "model.pt")["state_dict"]
    with np.load(gd / "predictions.npz") as npz:
        preds = {k: npz[k] for k in npz.files}
    return weights, (gd / "metrics.csv").read_text(), preds


def assert_same(a: Path, b: Path) -> None:
    wa, ma, pa = outputs(a)
    wb, mb, pb = outputs(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert ma == mb   # no timing columns: the whole file
    assert pa.keys() == pb.keys() and all(np.array_equal(pa[k], pb[k]) for k in pa)


class Stop:
    """Inject an interrupt (as gbcli.interrupts raises it on SIGTERM) when the plain loop's progress
    reaches `step` (after that step's update) or when step `step` is being logged (before it)."""

    def __init__(self, monkeypatch, step: int, where: str = "after", error: type = interrupts.Interrupted):
        self.step, self.fired, self.error = step, False, error
        if where == "after":
            advance = logs.Progress.advance

            def hooked(bar, n=1):
                advance(bar, n)
                if bar.done == step and n == 1:
                    self.fire()
            monkeypatch.setattr(logs.Progress, "advance", hooked)
        else:
            log = MetricLog.log

            def hooked(metrics, model, at, *args, **kw):
                ok = log(metrics, model, at, *args, **kw)
                if at == step:
                    self.fire()
                return ok
            monkeypatch.setattr(MetricLog, "log", hooked)

    def fire(self):
        if not self.fired:
            self.fired = True
            raise self.error("SIGTERM") if self.error is interrupts.Interrupted else self.error("crash")


# ------------------------------------------------------------------ library level


def interrupted_twin(cfg, tmp_path, monkeypatch, step, where):
    """Train `cfg` whole, and again cut by a Stop at (step, where); returns the cut run's checkpoint."""
    train_gd(cfg, tmp_path / "whole", progress=False)
    with monkeypatch.context() as m:
        stop = Stop(m, step, where)
        with pytest.raises(interrupts.Interrupted):
            train_gd(cfg, tmp_path / "cut", progress=False)
        assert stop.fired
    return tmp_path / "cut" / "gd" / "checkpoint.pt"


def assert_keeps_no_checkpoint(cfg, run, monkeypatch):
    """Interrupted at step 20, the run leaves no checkpoint and its rerun starts from step 0."""
    with monkeypatch.context() as m:
        Stop(m, 20)
        with pytest.raises(interrupts.Interrupted):
            train_gd(cfg, run, progress=False)
    assert not (run / "gd" / "checkpoint.pt").exists()
    assert "resumed_from_step" not in train_gd(cfg, run, progress=False)


@pytest.mark.parametrize("opt", list(OPTIMIZERS))
@pytest.mark.parametrize("step,where", [(21, "after"), (24, "after"), (30, "log"), (48, "log")])
def test_interrupted_run_resumes_bit_identical(tmp_path, monkeypatch, opt, step, where):
    """Interrupted mid-epoch, at an epoch's end (step 24 = 6 x 4: the lr milestone), while a step
    is being logged, or while the last step is (nothing left but the final row): the resumed run
    equals the uninterrupted one, and the checkpoint is gone."""
    cfg = config(*OPTIMIZERS[opt])
    ckpt = interrupted_twin(cfg, tmp_path, monkeypatch, step, where)
    assert ckpt.is_file() and not (tmp_path / "cut" / "gd" / "summary.json").exists()
    state = torch.load(ckpt, weights_only=True)   # tensors and plain containers only
    assert state["step"] == step
    summary = train_gd(cfg, tmp_path / "cut", progress=False)
    assert summary["resumed_from_step"] == step and summary["status"] == "ok"
    assert not ckpt.exists()
    assert_same(tmp_path / "whole", tmp_path / "cut")


def test_crash_resumes_from_last_periodic_checkpoint(tmp_path, monkeypatch):
    """A process that dies without a word (here: an exception the loop does not handle, standing in
    for SIGKILL) leaves the last periodic checkpoint, an earlier step; resuming from it is exact."""
    cfg = config(*OPTIMIZERS["momentum"])
    train_gd(cfg, tmp_path / "whole", progress=False)
    with monkeypatch.context() as m:
        Stop(m, 33, error=RuntimeError)
        with pytest.raises(RuntimeError):
            train_gd(cfg, tmp_path / "cut", progress=False)
    state = torch.load(tmp_path / "cut" / "gd" / "checkpoint.pt", weights_only=True)
    assert 0 < state["step"] <= 33
    summary = train_gd(cfg, tmp_path / "cut", progress=False)
    assert summary["resumed_from_step"] == state["step"]
    assert_same(tmp_path / "whole", tmp_path / "cut")


@pytest.mark.parametrize("momentum", [0, 0.9])
def test_shallow_gln_trained_rows_resume(tmp_path, monkeypatch, momentum):
    """The shallow GLN trains only the rows of used contexts (a parameter reshaped before
    training; sparse gradients without momentum): its checkpoint fits the reshaped network."""
    cfg = config("model.kind=shallow", "model.hidden_units=1", "model.output_bias=false", "svm.objectives=[]",
                 f"training.momentum={momentum}")
    train_gd(cfg, tmp_path / "whole", progress=False)
    with monkeypatch.context() as m:
        Stop(m, 19)
        with pytest.raises(interrupts.Interrupted):
            train_gd(cfg, tmp_path / "cut", progress=False)
    assert train_gd(cfg, tmp_path / "cut", progress=False)["resumed_from_step"] == 19
    assert_same(tmp_path / "whole", tmp_path / "cut")


def test_frelu_gates_frozen_mid_run(tmp_path, monkeypatch):
    """FReLU's gates freeze at an epoch's start (a buffer that changes shape): a checkpoint after
    the freeze resumes with the frozen gates, one before it freezes them at the same epoch."""
    cfg = config("model.kind=frelu", "model.hidden_units=4", "model.freeze_gates_after=3", "svm.objectives=[]")
    train_gd(cfg, tmp_path / "whole", progress=False)
    for k, step in enumerate((10, 17)):   # before the freeze (epoch 2), after it (epoch 4)
        with monkeypatch.context() as m:
            Stop(m, step)
            with pytest.raises(interrupts.Interrupted):
                train_gd(cfg, tmp_path / f"cut{k}", progress=False)
        assert train_gd(cfg, tmp_path / f"cut{k}", progress=False)["resumed_from_step"] == step
        assert_same(tmp_path / "whole", tmp_path / f"cut{k}")


@pytest.mark.parametrize("step,where", [(21, "after"), (30, "log")])
def test_tracked_run_resumes_bit_identical(tmp_path, monkeypatch, step, where):
    """Instruments that read only the weights of the step (margin, kkt, agreement, convergence:
    `Instrument.resumable`) keep the checkpoints: the long tracked runs of issue 37 resume, and the
    resumed metrics.csv, tracked columns included, is the uninterrupted run's."""
    cfg = config("model.output_bias=false", "training.track=[margin, kkt, agreement, convergence]")
    ckpt = interrupted_twin(cfg, tmp_path, monkeypatch, step, where)
    assert torch.load(ckpt, weights_only=True)["step"] == step
    summary = train_gd(cfg, tmp_path / "cut", progress=False)
    assert summary["resumed_from_step"] == step and summary["status"] == "ok"
    assert "angle_svm_gln" in (tmp_path / "cut" / "gd" / "metrics.csv").read_text().splitlines()[0]
    assert_same(tmp_path / "whole", tmp_path / "cut")


def test_checkpoint_progress_reads_a_running_trainings_rows(tmp_path, monkeypatch):
    """What a long run has logged so far, read from its checkpoint as resuming reads it: the rows
    before its step (the uninterrupted run's first rows), the step, the seconds; a file that is
    not a gb checkpoint gives None, never an unpickled object."""
    spec = importlib.util.spec_from_file_location("conjecture_summary", REPO / "scripts" / "conjecture_summary.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    checkpoint_progress = script.checkpoint_progress   # the script's reader of a running training

    cfg = config("model.output_bias=false", "training.track=[convergence]")
    train_gd(cfg, tmp_path / "whole", progress=False)
    with monkeypatch.context() as m:
        Stop(m, 30, "log")
        with pytest.raises(interrupts.Interrupted):
            train_gd(cfg, tmp_path / "cut", progress=False)
    rows, seconds, step = checkpoint_progress(tmp_path / "cut" / "gd" / "checkpoint.pt")
    whole = pd.read_csv(tmp_path / "whole" / "gd" / "metrics.csv")
    assert step == 30 and seconds > 0 and list(rows["step"]) == [s for s in whole["step"] if s < 30]
    assert np.allclose(rows["angle_svm_gln"], whole["angle_svm_gln"][: len(rows)], rtol=1e-12)
    bad = tmp_path / "bad.pt"
    bad.write_bytes(pickle.dumps({"format": 1, "rows": [], "seconds": 1.0, "step": 3}))
    assert checkpoint_progress(bad) is None and checkpoint_progress(tmp_path / "missing.pt") is None


def test_a_program_solved_mid_run_keeps_no_checkpoint(tmp_path, monkeypatch):
    """FReLU's matching program exists only once its gates freeze (epoch 3): a resume would solve it
    on other weights, so a run tracking it keeps no checkpoint and its rerun starts from step 0."""
    cfg = config("model.kind=frelu", "model.hidden_units=20", "model.freeze_gates_after=3", "svm.objectives=[]",
                 "training.track=[margin]")
    assert_keeps_no_checkpoint(cfg, tmp_path / "run", monkeypatch)


def test_batched_group_resumes_network_by_network(tmp_path, monkeypatch):
    """A sweep group trained as one computation writes each network's plain-loop checkpoint; an
    interrupted group resumes network by network and ends as the uninterrupted group."""
    cfgs = [config("training.momentum=0"), config("training.momentum=0.9")]

    def group(name):
        dirs = [tmp_path / name / f"p{k}" for k in range(len(cfgs))]
        return dirs, train_gd_group(cfgs, dirs)

    whole, sums = group("whole")
    assert all("batched" in s["provenance"] for s in sums)
    with monkeypatch.context() as m:
        Stop(m, 26, where="log")
        with pytest.raises(interrupts.Interrupted):
            group("cut")
    cut = [tmp_path / "cut" / f"p{k}" for k in range(len(cfgs))]
    assert all((d / "gd" / "checkpoint.pt").is_file() for d in cut)
    _, sums = group("cut")
    assert [s.get("resumed_from_step") for s in sums] == [26, 26]
    for a, b in zip(whole, cut):
        assert not (b / "gd" / "checkpoint.pt").exists()
        assert_same(a, b)


def test_checkpoint_interval_is_not_identity():
    """The interval changes no result: neither the gd manifest (a finished run stays finished, a
    checkpoint stays usable) nor a sweep point's id nor the default run directory."""
    from gbcli.config.loading import override_tag
    from gbcli.store.identity import point_id

    a, b = config(), config("training.checkpoint_seconds=7")
    assert gd_manifest(a) == gd_manifest(b) and point_id(a) == point_id(b)
    assert override_tag(["training.checkpoint_seconds=7"]) is None
    assert config("training.checkpoint_seconds=0").training.checkpoint_seconds == 0


def test_no_checkpoints_when_off(tmp_path, monkeypatch):
    """checkpoint_seconds: 0 writes none, even when interrupted (the rerun starts from step 0)."""
    cfg = config("training.checkpoint_seconds=0")
    assert_keeps_no_checkpoint(cfg, tmp_path / "run", monkeypatch)


# ------------------------------------------------------------------ hostile checkpoints


class Payload:
    """Unpickled, this would create the marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def interrupted(tmp_path, monkeypatch, cfg, name="cut", step=20) -> Path:
    with monkeypatch.context() as m:
        Stop(m, step)
        with pytest.raises(interrupts.Interrupted):
            train_gd(cfg, tmp_path / name, progress=False)
    return tmp_path / name / "gd" / "checkpoint.pt"


def hostile(kind: str, ckpt: Path, marker: Path, tmp_path, monkeypatch) -> None:
    if kind == "truncated":
        data = ckpt.read_bytes()
        ckpt.write_bytes(data[: len(data) // 2])
    elif kind == "other-config":   # a checkpoint of lr 0.05 in a run of lr 0.04
        other = interrupted(tmp_path, monkeypatch, config("training.lr=0.05"), name="other")
        os.replace(other, ckpt)
    elif kind == "pickle-zip":     # torch's zip format, with a payload among the tensors
        state = torch.load(ckpt, weights_only=True)
        state["extra"] = Payload(marker)
        torch.save(state, ckpt)
    elif kind == "pickle-raw":     # a bare pickle
        ckpt.write_bytes(pickle.dumps({"format": 1, "x": Payload(marker)}))
    elif kind == "wrong-shapes":   # right identity, a tampered tensor
        state = torch.load(ckpt, weights_only=True)
        name = next(iter(state["model"]))
        state["model"][name] = torch.zeros(3, 3)
        torch.save(state, ckpt)
    elif kind == "directory":
        ckpt.unlink()
        (ckpt / "sub").mkdir(parents=True)


def test_a_sweep_names_only_checkpoints_of_its_own_config(tmp_path, monkeypatch):
    """`checkpoint_step`, which a resumed sweep's "resuming ... at step N" line reads: the step of a
    checkpoint of this config, None for one of another config (which trains from step 0)."""
    from gbcli.store.identity import gd_manifest
    from gbcli.training.loop import checkpoint_step

    cfg = config()
    ckpt = interrupted(tmp_path, monkeypatch, cfg)
    assert checkpoint_step(ckpt, gd_manifest(cfg)["config"]) == 20
    assert checkpoint_step(ckpt, gd_manifest(config("training.lr=0.5"))["config"]) is None
    assert checkpoint_step(tmp_path / "missing.pt", gd_manifest(cfg)["config"]) is None


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("kind", ["truncated", "other-config", "pickle-zip", "pickle-raw", "wrong-shapes", "directory"])
def test_hostile_checkpoint_is_not_used(tmp_path, monkeypatch, caplog, kind):
    cfg = config()
    train_gd(cfg, tmp_path / "whole", progress=False)
    ckpt = interrupted(tmp_path, monkeypatch, cfg)
    marker = tmp_path / "unpickled"
    hostile(kind, ckpt, marker, tmp_path, monkeypatch)
    with caplog.at_level("WARNING", logger="gbcli"):
        summary = train_gd(cfg, tmp_path / "cut", progress=False)
    assert not marker.exists()   # never unpickled
    assert "resumed_from_step" not in summary and summary["status"] == "ok"
    assert any("checkpoint.pt" in r.getMessage() and "step 0" in r.getMessage() for r in caplog.records)
    assert not os.path.lexists(ckpt)
    assert_same(tmp_path / "whole", tmp_path / "cut")


def test_symlinked_checkpoint_is_refused(tmp_path, monkeypatch):
    """A checkpoint.pt that links elsewhere: one line, and the link's target is neither read nor
    written nor removed."""
    cfg = config()
    ckpt = interrupted(tmp_path, monkeypatch, cfg)
    target = tmp_path / "elsewhere.pt"
    os.replace(ckpt, target)
    before = target.read_bytes()
    ckpt.symlink_to(target)
    with pytest.raises(GbError) as err:
        train_gd(cfg, tmp_path / "cut", progress=False)
    assert "symlink" in str(err.value) and "\n" not in str(err.value)
    assert target.read_bytes() == before and ckpt.is_symlink()


# ------------------------------------------------------------------ process level


def gb(tmp_path, data_dir, *args, **kw):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GB_DATA_DIR": str(data_dir)}
    return subprocess.Popen([*GB, "train-gd", str(QUICKSTART), "-q", *args], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, **kw)


# the published quickstart schedule (3200 steps, a few seconds), a checkpoint every 0.2 s
PROCESS_SETS = ["--set", "training.checkpoint_seconds=0.2", "--set", "svm.objectives=[]"]


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory, shared_data_dir):
    tmp = tmp_path_factory.mktemp("whole")
    proc = gb(tmp, shared_data_dir, "--out", "whole", *PROCESS_SETS)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return tmp / "whole"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_process_stopped_and_rerun(tmp_path, shared_data_dir, whole_run, sig):
    """`gb train-gd` stopped by SIGTERM (exit 130, a checkpoint written on the way out) or SIGKILL
    (the last periodic checkpoint): the same command again resumes and ends as the whole run."""
    proc = gb(tmp_path, shared_data_dir, "--out", "cut", *PROCESS_SETS)
    ckpt = tmp_path / "cut" / "gd" / "checkpoint.pt"
    deadline = time.monotonic() + 300
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ckpt.exists(), "no checkpoint before the run ended"
    time.sleep(0.3)
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the run finished before the signal (a very fast machine)")
    assert proc.returncode == (130 if sig == signal.SIGTERM else -signal.SIGKILL), err
    if sig == signal.SIGTERM:
        assert "interrupted (SIGTERM)" in err and "Traceback" not in err
    step = torch.load(ckpt, weights_only=True)["step"]
    assert 0 < step < 3200
    again = gb(tmp_path, shared_data_dir, "--out", "cut", *PROCESS_SETS)
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    summary = __import__("json").loads((tmp_path / "cut" / "gd" / "summary.json").read_text())
    assert summary["resumed_from_step"] == step
    assert not ckpt.exists()
    assert_same(whole_run, tmp_path / "cut")


@pytest.mark.slow
def test_sweep_stopped_during_batched_training_resumes(tmp_path, shared_data_dir):
    """`gb sweep` stopped by SIGTERM while its two points train as one computation (its pool worker
    dies at once: the periodic per-network checkpoints are what is left): the same command resumes
    each network with the plain loop, and every point ends as in a sweep never stopped."""
    import yaml

    spec = {"name": "grid", "dataset": {"name": "digits", "train_size": 500, "val_size": 300},
            "model": {"kind": "gln", "hidden_units": 3}, "contexts": {"count": 4},
            "training": {"epochs": 150, "batch_size": 16, "checkpoint_seconds": 0.2},
            "grid": {"training.momentum": [0.0, 0.9]}}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(spec))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GB_DATA_DIR": str(shared_data_dir)}

    def sweep(out):
        return subprocess.Popen([*GB, "sweep", "grid.yaml", "-q", "--out", out, "--jobs", "1"], cwd=tmp_path, env=env,
                                text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)

    proc = sweep("cut")
    deadline = time.monotonic() + 300
    while len(list((tmp_path / "cut").glob("points/*/gd/checkpoint.pt"))) < 2 and proc.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the sweep finished before the signal (a very fast machine)")
    assert proc.returncode == 130, err
    points = sorted((tmp_path / "cut" / "points").iterdir())
    assert len(points) == 2 and all((p / "gd" / "checkpoint.pt").is_file() for p in points)
    said = {}
    for out in ("cut", "whole"):
        run = sweep(out)
        said[out], err = run.communicate(timeout=900)
        said[out] += err
        assert run.returncode == 0, err
    assert "resuming 2 points from their training checkpoints" in said["cut"] and "resuming" not in said["whole"]
    for p in points:
        summary = __import__("json").loads((p / "gd" / "summary.json").read_text())
        assert summary["resumed_from_step"] > 0 and not (p / "gd" / "checkpoint.pt").exists()
        assert f"{p.name} at step {summary['resumed_from_step']:,}" in said["cut"], said["cut"]
        assert_same(tmp_path / "whole" / "points" / p.name, p)
