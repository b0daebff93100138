"""Issue 26: a working-set solve checkpoints every round and resumes from it; svm.time_limit stops a
solve `inaccurate` with its bounds, and the next run picks it up. Real MNIST, the real solver."""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from gbcli.config import load_config
from gbcli.errors import GbError
from gbcli.programs.certify import certificate
from gbcli.programs.solvers import SOLVERS
from gbcli.runs.stages import build_design, prepare
import forked_gb

ROOT = Path(__file__).resolve().parents[1]
CHECK = "abc123"   # a checkpoint's fingerprint (the stage uses the solve cache's key)


@pytest.fixture(scope="module")
def design(shared_data_dir):   # real MNIST: skips with the reason where there is none
    cfg = load_config(ROOT / "configs" / "mnist-gln-small.yaml", (
        "name=resume", "model.kind=gln", "model.hidden_units=20", "contexts.count=2",
        "dataset.train_size=1200", "svm.objectives=[svm-l2]"))
    return build_design("svm-l2", cfg, prepare(cfg))


@pytest.fixture(scope="module")
def uninterrupted(design):
    sol = SOLVERS["dual"].solve(design, working_set=True)
    rounds = int(sol.message.split("working set: ")[1].split(" rounds")[0])
    assert rounds >= 3, sol.message   # the resume below needs rounds on both sides of the cut
    return sol, rounds


def test_a_stopped_working_set_resumes_at_its_next_round(design, uninterrupted, tmp_path, caplog):
    full, rounds = uninterrupted
    path = tmp_path / "rounds.npz"
    cut = SOLVERS["dual"].solve(design, working_set=True, checkpoint=(path, CHECK), through=2)
    assert cut.status == "inaccurate" and cut.zeta is None and path.is_file()
    bounds = certificate(design, cut)   # a stopped solve still bounds the optimum from below
    assert not bounds["certified"] and 0 < bounds["dual_objective"] <= full.value
    with caplog.at_level(logging.INFO, logger="gbcli"):
        resumed = SOLVERS["dual"].solve(design, working_set=True, checkpoint=(path, CHECK))
    assert "resumed at round 3" in caplog.text
    assert "working set round 1:" not in caplog.text and "working set round 2:" not in caplog.text
    assert certificate(design, resumed)["certified"] and resumed.status == "optimal"
    # the same rounds from the same state: the same answer, bit for bit
    assert resumed.value == full.value and np.array_equal(resumed.zeta, full.zeta)
    assert f"working set: {rounds} rounds" in resumed.message
    assert "resumed at round 3, after " in resumed.message and "resumed" not in full.message


def _checkpoint_after_one_round(design, path: Path) -> None:
    SOLVERS["dual"].solve(design, working_set=True, checkpoint=(path, CHECK), through=1)
    assert path.is_file()


def _tamper_fingerprint(path: Path) -> None:
    with np.load(path) as z:
        arrays = dict(z)
    arrays["fingerprint"] = np.array("another program")
    np.savez(path, **arrays)


def _tamper_indices(path: Path) -> None:
    with np.load(path) as z:
        arrays = dict(z)
    arrays["w"] = arrays["w"].copy()
    arrays["w"][-1] = 10 ** 9   # an index past N
    np.savez(path, **arrays)


def _pickle_payload(path: Path) -> None:
    marker = path.parent / "MARKER"
    with np.load(path) as z:
        arrays = dict(z)
    arrays["w"] = np.array([_Touch(str(marker))], dtype=object)
    np.savez(path, **arrays)   # an object array: loading it unsafely would run _Touch.__reduce__


class _Touch:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("harm, expect", [
    (_tamper_fingerprint, "belongs to another program"),
    (_tamper_indices, "not a usable round checkpoint"),
    (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "not a usable round checkpoint"),
    (_pickle_payload, "not a usable round checkpoint"),
])
def test_a_foreign_or_damaged_checkpoint_is_ignored(design, uninterrupted, tmp_path, caplog, harm, expect):
    path = tmp_path / "rounds.npz"
    _checkpoint_after_one_round(design, path)
    harm(path)
    with caplog.at_level(logging.INFO, logger="gbcli"):
        sol = SOLVERS["dual"].solve(design, working_set=True, checkpoint=(path, CHECK))
    assert expect in caplog.text and "working set round 1:" in caplog.text   # from scratch
    assert not (tmp_path / "MARKER").exists()
    assert certificate(design, sol)["certified"] and sol.value == uninterrupted[0].value


def test_a_symlinked_checkpoint_is_not_followed(design, tmp_path, caplog):
    real = tmp_path / "elsewhere.npz"
    _checkpoint_after_one_round(design, real)
    before = real.read_bytes()
    link = tmp_path / "rounds.npz"
    link.symlink_to(real)
    with caplog.at_level(logging.INFO, logger="gbcli"):
        SOLVERS["dual"].solve(design, working_set=True, checkpoint=(link, CHECK), through=2)
    assert "symbolic link" in caplog.text and "working set round 1:" in caplog.text
    assert real.read_bytes() == before           # written through? never
    assert not link.is_symlink() and link.is_file()   # the link itself was replaced by the new checkpoint


def test_time_limit_stops_with_bounds(design, uninterrupted):
    sol = SOLVERS["dual"].solve(design, working_set=True, time_limit=1e-6)
    assert sol.status in ("inaccurate", "failed") and "time limit" in sol.message
    cert = certificate(design, sol)
    assert not cert["certified"]


# ------------------------------------------------------------------ through the CLI


def gb(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return forked_gb.run(args, cwd, dict(os.environ), timeout=600, argv0=forked_gb.CLI)   # digits: no data needed


def quickstart(tmp_path: Path, **svm) -> Path:
    cfg = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    cfg["svm"] = {**cfg.get("svm", {}), "objectives": ["svm-l2"], **svm}
    cfg["name"] = "tl"
    path = tmp_path / "tl.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
def test_fit_svm_time_limit_then_a_rerun_solves_it(tmp_path):
    path = quickstart(tmp_path, time_limit=1e-9)
    out = tmp_path / "run"
    proc = gb(tmp_path, "fit-svm", str(path), "--out", str(out))
    assert proc.returncode != 0, proc.stdout + proc.stderr
    rec = json.loads((out / "svm" / "svm-l2" / "result.json").read_text())
    assert rec["status"] != "optimal" and rec["time_limited"] is True and not rec["certified"]
    assert "time limit" in rec["message"]
    # the same problem without a limit (time_limit is not what is solved): solved again, not refused
    path = quickstart(tmp_path)
    proc = gb(tmp_path, "fit-svm", str(path), "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rec = json.loads((out / "svm" / "svm-l2" / "result.json").read_text())
    assert rec["status"] == "optimal" and rec["certified"] and "time_limited" not in rec


def test_time_limit_refused_for_a_solver_that_does_not_honour_it(tmp_path):
    path = quickstart(tmp_path, time_limit=10, solver="clarabel")
    proc = gb(tmp_path, "fit-svm", str(path), "--out", str(tmp_path / "run"))
    assert proc.returncode == 2 and "svm.time_limit" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()


def test_cuda_svm_device_refused_without_a_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    path = quickstart(tmp_path, device="cuda")
    proc = gb(tmp_path, "fit-svm", str(path), "--out", str(tmp_path / "run"))
    assert proc.returncode == 2 and "svm.device" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_sweep_picks_up_its_time_limited_programs(tmp_path):
    cfg = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    cfg.update(name="tlsweep", svm={"objectives": ["svm-l2"], "time_limit": 1e-9}, grid={"contexts.seed": [1, 2]})
    path = tmp_path / "tlsweep.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "sw"
    proc = gb(tmp_path, "sweep", str(path), "--out", str(out), "-q")
    assert proc.returncode != 0
    records = sorted(out.glob("points/*/svm/svm-l2/result.json"))
    assert len(records) == 2 and all(json.loads(r.read_text())["time_limited"] for r in records)
    cfg["svm"] = {"objectives": ["svm-l2"], "time_limit": 600}   # the same points: a limit is not what is solved
    path.write_text(yaml.safe_dump(cfg))
    proc = gb(tmp_path, "sweep", str(path), "--out", str(out), "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(out.glob("points/*/svm/svm-l2/result.json")) == records
    for r in records:
        rec = json.loads(r.read_text())
        assert rec["status"] == "optimal" and rec["certified"] and "time_limited" not in rec


# ------------------------------------------------------------------ a sweep's twin points


@pytest.fixture()
def staged(monkeypatch, shared_data_dir):
    """The design fixture's config through the fit-svm stage, the working set forced on at N = 1200."""
    from gbcli.programs import workingset

    monkeypatch.setattr(workingset, "WORKING_SET_ABOVE", 100)
    cfg = load_config(ROOT / "configs" / "mnist-gln-small.yaml", (
        "name=resume", "model.kind=gln", "model.hidden_units=20", "contexts.count=2",
        "dataset.train_size=1200", "svm.objectives=[svm-l2]"))
    return cfg, prepare(cfg)


def _stop_after_round_2(cfg, problem, where: Path, key: str) -> None:
    design = build_design("svm-l2", cfg, problem)
    SOLVERS["dual"].solve(design, cfg.svm.max_iters, cfg.svm.eps, working_set=True, checkpoint=(where, key), through=2)
    assert where.is_file()


@pytest.mark.parametrize("saved_by", ["twin", "this point, by an older gb"])
def test_a_sweep_resumes_the_rounds_of_a_program_whichever_point_saved_them(staged, tmp_path, caplog, saved_by):
    """In a sweep the round checkpoint belongs to the program (OUT/solves/<key>.rounds.npz): after an
    interruption the twin point that takes the program's claim resumes the rounds another point saved.
    A point's own svm/<objective>/rounds.npz (where gb kept it before) is taken over."""
    from gbcli.store.cache import SolveCache
    from gbcli.runs.stages import fit_svm

    cfg, problem = staged
    reference = fit_svm(cfg, tmp_path / "alone", problem=problem, progress=False)[0]
    cache = SolveCache(tmp_path / "solves")
    key = cache.key(build_design("svm-l2", cfg, problem), "dual", cfg.svm.max_iters, cfg.svm.eps, cfg.svm.certify_tol)
    point = tmp_path / "points" / "b"
    local = point / "svm" / "svm-l2" / "rounds.npz"
    if saved_by == "twin":
        cache.folder.mkdir(parents=True)
        _stop_after_round_2(cfg, problem, cache.rounds(key), key)
    else:
        local.parent.mkdir(parents=True)
        _stop_after_round_2(cfg, problem, local, key)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gbcli"):
        rec = fit_svm(cfg, point, problem=problem, progress=False, cache=cache)[0]
    assert "resumed at round 3" in caplog.text and "working set round 1:" not in caplog.text
    assert rec["status"] == "optimal" and rec["certified"]
    assert rec["objective"] == reference["objective"]   # the same rounds from the same state: the same answer
    assert not cache.rounds(key).exists() and not local.exists()   # scratch, gone once certified


def test_a_symlinked_point_checkpoint_is_not_taken_over(staged, tmp_path, caplog):
    from gbcli.store.cache import SolveCache
    from gbcli.runs.stages import fit_svm

    cfg, problem = staged
    cache = SolveCache(tmp_path / "solves")
    key = cache.key(build_design("svm-l2", cfg, problem), "dual", cfg.svm.max_iters, cfg.svm.eps, cfg.svm.certify_tol)
    real = tmp_path / "elsewhere.npz"
    _stop_after_round_2(cfg, problem, real, key)
    before = real.read_bytes()
    local = tmp_path / "points" / "b" / "svm" / "svm-l2" / "rounds.npz"
    local.parent.mkdir(parents=True)
    local.symlink_to(real)
    with pytest.raises(GbError, match="is a symlink"):   # refused before anything is read or moved
        fit_svm(cfg, tmp_path / "points" / "b", problem=problem, progress=False, cache=cache)
    assert local.is_symlink() and real.read_bytes() == before and not cache.rounds(key).exists()


def test_a_stop_reason_ends_the_working_set_between_rounds(design, uninterrupted, tmp_path):
    """`stop` (the stage's: a ray that answers the program arrived) is asked before each round after
    the first; its reason ends the solve there, resumable from the round checkpoint."""
    from gbcli.programs.workingset import STOPPED

    asked = []

    def stop():
        asked.append(1)
        return "enough" if len(asked) >= 2 else None

    path = tmp_path / "rounds.npz"
    sol = SOLVERS["dual"].solve(design, working_set=True, checkpoint=(path, CHECK), stop=stop)
    assert sol.status == "inaccurate" and sol.message == f"{STOPPED} before round 3: enough" and sol.zeta is None
    assert len(asked) == 2 and path.is_file()
    resumed = SOLVERS["dual"].solve(design, working_set=True, checkpoint=(path, CHECK))
    assert resumed.status == "optimal" and resumed.value == uninterrupted[0].value
