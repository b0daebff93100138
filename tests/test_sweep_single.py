"""Sweep = single run: a sweep point's config.yaml, run alone with `gb train-gd` and `gb fit-svm`,
gives the point's numbers bit for bit, batched training and the solve cache included (README, "A
point re-run alone").

Each model kind is checked on a small grid of 3 points that share their batch key (GLN: trained as
one computation) and some programs (svm-gln / svm-l2 of a momentum twin, svm-rc of every ReLU net:
reused from the solve cache). The ReLU net does not stack (`ReLUSpec.Stacked` is None): its
points train alone, and its learned-gate programs depend on the trained network bit for bit. The
fast tests run the sweep's worker (`run_group`) and the stages in-process on digits; the slow ones
run `gb sweep`, `gb train-gd` and `gb fit-svm` on a small MNIST subset, without any thread
variable in the environment: the commands' default of one thread (a sweep worker's) is what makes
them agree there (on 2 threads a fig3 net ended 0.04 away in its weights).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import threadpoolctl
import torch
import yaml

from gbcli.config import load_config
from gbcli.store.cache import SolveCache
from gbcli.runs.stages import build_design, fit_svm, prepare, train_gd
from gbcli.runs.sweep import expand, group_points, point_id, run_group
from gbcli.training.batched import batch_key
import forked_gb

REPO = Path(__file__).resolve().parents[1]

# 3 points each: one batch key; two of them with the same programs (a solve-cache hit)
KINDS = {
    "gln": {"model": {"kind": "gln", "hidden_units": 3}, "contexts": {"count": 2, "seed": 1},
            "svm": {"objectives": ["svm-gln", "svm-l2"]},
            "zip": {"contexts.seed": [1, 1, 2], "training.momentum": [0.0, 0.9, 0.0]}},
    "relu": {"model": {"kind": "relu", "hidden_units": 4},
             "svm": {"objectives": ["svm-rc", "svm-lc", "svm-lc-always-on", "svm-hl"]},
             "zip": {"model.init_seed": [1, 2, 1], "training.momentum": [0.0, 0.0, 0.9]}},
}
DIGITS = {"dataset": {"name": "digits", "train_size": 150, "val_size": 300}, "training": {"epochs": 30, "log_points": 5}}
# MNIST: products large enough that their sums' order depends on the thread count
MNIST = {"dataset": {"name": "mnist", "train_size": 300, "val_size": 1000}, "training": {"epochs": 20, "log_points": 5},
         "model": {"hidden_units": 10}}
MNIST_KIND = {"gln": {"contexts": {"count": 4}}, "relu": {}}
RESULT_KEYS = ("status", "objective", "train_error", "val_error", "certified", "rel_gap", "min_margin", "iterations")
SUMMARY_KEYS = ("status", "train_error", "val_error", "train_loss", "weight_norm", "normalized_margin", "steps")
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS")


@pytest.fixture(autouse=True)
def restore_threads():
    """The sweep's worker and the stages run in this process on one thread (as a worker does);
    the test process gets its thread counts back afterwards."""
    old = torch.get_num_threads()
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        torch.set_num_threads(1)
        yield
    torch.set_num_threads(old)


def grid(tmp_path: Path, kind: str, base: dict) -> Path:
    """The kind's grid with `base`'s sections (data, training; a size of the model) over it."""
    body = {"name": f"single-{kind}", **json.loads(json.dumps(KINDS[kind]))}
    for section, values in base.items():
        body[section] = {**body.get(section, {}), **values}
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def assert_same_numbers(point: Path, alone: Path, objectives: list[str]) -> None:
    """The point's network (weights, metrics.csv, predictions, summary) and every program's result
    (objective, errors, certificate, predictions, solution) are the alone run's, bit for bit."""
    a = torch.load(point / "gd" / "model.pt", weights_only=True)["state_dict"]
    b = torch.load(alone / "gd" / "model.pt", weights_only=True)["state_dict"]
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"gd/model.pt: {k} differs by {(a[k] - b[k]).abs().max().item():.3g}"
    assert (point / "gd" / "metrics.csv").read_bytes() == (alone / "gd" / "metrics.csv").read_bytes()
    pa, pb = arrays(point / "gd" / "predictions.npz"), arrays(alone / "gd" / "predictions.npz")
    assert pa.keys() == pb.keys() and all(np.array_equal(pa[k], pb[k]) for k in pa)
    sa, sb = (json.loads((d / "gd" / "summary.json").read_text()) for d in (point, alone))
    assert all(same(sa[k], sb[k]) for k in SUMMARY_KEYS), {k: (sa[k], sb[k]) for k in SUMMARY_KEYS}
    for o in objectives:
        ra, rb = (json.loads((d / "svm" / o / "result.json").read_text()) for d in (point, alone))
        assert all(same(ra.get(k), rb.get(k)) for k in RESULT_KEYS), \
            (o, {k: (ra.get(k), rb.get(k)) for k in RESULT_KEYS if not same(ra.get(k), rb.get(k))})
        for stem in ("predictions", "compact"):
            fa, fb = point / "svm" / o / f"{stem}.npz", alone / "svm" / o / f"{stem}.npz"
            assert fa.is_file() == fb.is_file(), (o, stem)
            if fa.is_file():
                xa, xb = arrays(fa), arrays(fb)
                assert xa.keys() == xb.keys() and all(np.array_equal(xa[k], xb[k]) for k in xa), (o, stem)


def reused_point(out: Path, objectives: list[str]) -> Path:
    """A point of the sweep with a program taken from the solve cache."""
    for d in sorted((out / "points").iterdir()):
        if any("cached_from" in json.loads((d / "svm" / o / "result.json").read_text()) for o in objectives):
            return d
    raise AssertionError(f"{out}: no point reused a solve (the test grid must share a program)")


def batched(point: Path) -> bool:
    return "batched" in json.loads((point / "gd" / "summary.json").read_text())["provenance"]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_sweep_point_run_alone_gives_its_numbers(kind, tmp_path):
    """In-process, on digits: the sweep's worker (`run_group`: batched training, the solve cache),
    then the point's gd/config.yaml through `train_gd` and `fit_svm` alone."""
    _, points = expand(grid(tmp_path, kind, DIGITS))
    assert len(points) == 3 and len({batch_key(p) for p in points}) == 1
    out = tmp_path / "sweep"
    for group in group_points(points, len(points)):
        records = run_group([p.to_dict() for p in group], [str(out / "points" / point_id(p)) for p in group],
                            str(out / "solves"), threads=1)
        assert all(r["status"] == "done" for r in records), records
    objectives = KINDS[kind]["svm"]["objectives"]
    point = reused_point(out, objectives)
    # the GLN's three networks were one computation; the ReLU net does not stack (trained alone)
    assert batched(point) == (kind == "gln") and (batch_key(points[0]) is None) == (kind == "relu")
    cfg = load_config(point / "gd" / "config.yaml")
    alone = tmp_path / "alone"
    train_gd(cfg, alone, progress=False)
    fit_svm(cfg, alone, progress=False, echo=lambda _: None)
    assert_same_numbers(point, alone, objectives)


def gb(cwd: Path, *args: str, data_dir: Path) -> subprocess.CompletedProcess:
    """`gb` as a user runs it: no thread variable in the environment (torch would take every core)."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env["GB_DATA_DIR"] = str(data_dir)
    return forked_gb.run(args, cwd, env, timeout=900, argv0=forked_gb.CLI)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_gb_train_gd_and_fit_svm_reproduce_a_sweep_point(kind, tmp_path, shared_data_dir):
    """End to end on MNIST: `gb sweep`, then `gb train-gd` and `gb fit-svm` on one point's
    gd/config.yaml (their default of one thread, as the sweep's workers)."""
    path = grid(tmp_path, kind, {**MNIST, **MNIST_KIND[kind]})
    p = gb(tmp_path, "sweep", str(path), "--out", "sweep", "--jobs", "1", "-q", data_dir=shared_data_dir)
    assert p.returncode == 0, p.stdout + p.stderr
    objectives = KINDS[kind]["svm"]["objectives"]
    point = reused_point(tmp_path / "sweep", objectives)
    assert batched(point) == (kind == "gln")
    config = str(point / "gd" / "config.yaml")
    for command in ("train-gd", "fit-svm"):
        p = gb(tmp_path, command, config, "--out", "alone", "-q", data_dir=shared_data_dir)
        assert p.returncode == 0, p.stdout + p.stderr
    assert_same_numbers(point, tmp_path / "alone", objectives)
    threads = json.loads((tmp_path / "alone" / "gd" / "summary.json").read_text())["provenance"]["torch_threads"]
    assert threads == 1


def test_the_solve_cache_keys_the_device():
    """A program solved on a GPU sums in another order: its answer is not reused for the CPU (a CPU
    key is the one of before the device was part of the key: existing solves/ stay valid)."""
    cfg = load_config(REPO / "configs" / "quickstart.yaml", ("dataset.train_size=100",))
    design = build_design(cfg.svm.objectives[0], cfg, prepare(cfg))
    cache = SolveCache()
    cpu = cache.key(design, "dual", None, None, 1e-6)
    assert cache.key(design, "dual", None, None, 1e-6, "cpu") == cpu
    assert cache.key(design, "dual", None, None, 1e-6, "cuda") != cpu
