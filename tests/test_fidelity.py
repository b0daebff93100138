"""Definitions as the papers and the published code have them (protocol sections 5 and 10)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gbcli.config import validate
from gbcli.models.gating import projections, published_hyperplanes, sample_hyperplanes, torch_median
from gbcli.runs.compare import compare_run
from gbcli.runs.stages import fit_svm, prepare, train_gd

GATES_OFF = {"name": "lc", "dataset": {"name": "points", "x": [[1.0, 0.1], [0.1, 1.0], [-1.0, -1.0]], "y": [1, -1, 1]},
             "model": {"kind": "relu", "hidden_units": 2, "weights": {"w1": [[1.0, 0.0], [0.0, 1.0]], "w2": [[1.0, -1.0]]}},
             "training": {"batch_size": None, "epochs": 1, "lr": 1.0e-6, "log_points": 2},
             "svm": {"objectives": ["svm-lc", "svm-lc-always-on"]}}


def test_svm_lc_is_infeasible_when_a_training_point_has_every_gate_off(tmp_path):
    """svm-lc uses exactly the H learned gates (GLN paper eq. 22): the point (-1, -1) has both gates
    [w_h . x >= 0] off, so no predictor gives it a margin; the always-on variant separates it."""
    cfg = validate(GATES_OFF)
    train_gd(cfg, tmp_path, progress=False)
    res = {r["predictor"]: r for r in fit_svm(cfg, tmp_path, progress=False, echo=lambda m: None)}
    lc = res["svm-lc"]
    assert lc["status"] == "infeasible" and lc["certified"] and lc["relative_margin_bound"] <= 1e-9
    on = res["svm-lc-always-on"]
    assert on["status"] == "optimal" and on["certified"] and on["min_margin"] >= 1 - 1e-6
    errors, _ = compare_run(tmp_path)
    assert dict(zip(errors["predictor"], errors["status"]))["svm-lc"] == "infeasible"


def test_published_draws_reproduce_the_published_sequence():
    """contexts.draws: published = torch.manual_seed(cs); nn.Linear(D, H*k, bias=False); normal_(W, std=36);
    normal_(beta (H, k), std=9), in float32; row h*k + j is unit h, hyperplane j."""
    x = np.random.default_rng(0).standard_normal((50, 785))
    hp = published_hyperplanes(2, 4, x, seed=1, median_init=False)
    assert hp.normals.shape == (2, 2, 785) and hp.normals.dtype == np.float32
    # pinned values of the sequence for seed 1
    np.testing.assert_allclose(hp.normals[0, 0, :3], [-44.52816390991211, 25.54827308654785, 40.84100341796875])
    np.testing.assert_allclose(hp.offsets, [[16.26690673828125, 5.339613914489746], [-0.04077666252851486, 8.340960502624512]])
    # ... and the same as the sequence written out, which leaves the caller's generator alone
    state = torch.get_rng_state()
    torch.manual_seed(1)
    layer = torch.nn.Linear(785, 4, bias=False)
    w = torch.nn.init.normal_(layer.weight.detach(), std=36.0)
    beta = torch.nn.init.normal_(torch.empty(2, 2), std=9.0)
    torch.set_rng_state(state)
    np.testing.assert_array_equal(hp.normals.reshape(4, 785), w.numpy())
    np.testing.assert_array_equal(hp.raw_offsets, beta.numpy())
    before = torch.get_rng_state()
    published_hyperplanes(2, 4, x, seed=1)
    assert torch.equal(before, torch.get_rng_state())
    # median init: each hyperplane splits the pool in half (torch.quantile in float32)
    med = published_hyperplanes(2, 4, x, seed=1, median_init=True)
    side = (x.astype(np.float32) @ med.normals.reshape(4, 785).T > med.offsets.reshape(-1))
    assert np.all(side.sum(0) == 25)
    np.testing.assert_array_equal(med.raw_offsets, hp.raw_offsets)


@pytest.mark.parametrize("n", [1, 2, 7, 60, 1001])
def test_median_is_torch_quantile_bit_for_bit(n):
    """The published median init used torch.quantile(., 0.5) in float32; `torch_median` (a partition,
    not a sort) must give the same float32 bits, for odd and even N and with ties."""
    a = (np.random.default_rng(n).standard_normal((n, 9)) * 300).astype(np.float32)
    a[: n // 2, 3] = a[-1, 3]    # ties, which decide the median
    a[:, 5] = 1.0                # a constant column
    want = torch.stack([torch.quantile(torch.from_numpy(a[:, j]), 0.5) for j in range(a.shape[1])])
    got = torch_median(a)
    assert got.dtype == torch.float32 and torch.equal(got, want)


@pytest.mark.parametrize("median_init", [True, False])
def test_published_evaluation_changes_contexts_only_with_median_init(tmp_path, median_init):
    """The published comparison reloaded the GD network with the offsets as drawn: with median init
    its contexts (and so its predictions) differ; without, published_inconsistency = inconsistency."""
    cfg = validate({"name": "pub", "dataset": {"name": "digits", "train_size": 150, "val_size": 300},
                    "model": {"kind": "gln", "hidden_units": 4}, "training": {"epochs": 20},
                    "contexts": {"count": 2, "seed": 3, "median_init": median_init, "offset_std": 9.0},
                    "svm": {"objectives": ["svm-gln"]}})
    train_gd(cfg, tmp_path, progress=False)
    fit_svm(cfg, tmp_path, progress=False, echo=lambda m: None)
    _, incons = compare_run(tmp_path)
    row = incons.iloc[0]
    preds = np.load(tmp_path / "gd" / "predictions.npz")
    if median_init:
        hp = prepare(cfg).hyperplanes
        assert not np.array_equal(hp.offsets, hp.raw_offsets)
        assert "val_out_published" in preds.files
        assert not np.array_equal(np.sign(preds["val_out_published"]), np.sign(preds["val_out"]))
        assert row["published_inconsistency"] != row["inconsistency"]
    else:
        assert "val_out_published" not in preds.files
        assert row["published_inconsistency"] == row["inconsistency"]


def test_our_draws_keep_the_raw_offsets_and_are_unchanged():
    """`ours` (the default) still draws float64 normals N(0, 36^2) from a seeded generator; only the
    offsets as drawn are kept besides the medians."""
    x = np.random.default_rng(1).standard_normal((40, 10))
    hp = sample_hyperplanes(3, 4, x, seed=5)
    gen = torch.Generator().manual_seed(5)
    normals = (torch.randn(3, 2, 10, generator=gen, dtype=torch.float64) * 36.0).numpy()
    raw = (torch.randn(3, 2, generator=gen, dtype=torch.float64) * 9.0).numpy()
    np.testing.assert_array_equal(hp.normals, normals)
    np.testing.assert_array_equal(hp.raw_offsets, raw)
    np.testing.assert_allclose(hp.offsets, np.median(x @ normals.reshape(6, 10).T, axis=0).reshape(3, 2))


def test_published_gating_does_not_depend_on_the_blas():
    """Float32 gating is summed in float64 and rounded once, so an input's side of a hyperplane does
    not depend on which other rows are in the matrix (BLAS blocking) or on the thread count: each row
    alone, the whole matrix, and the rows reversed give the same bits, equal to the exact sum rounded."""
    rng = np.random.default_rng(3)
    x = rng.random((400, 785)) * (rng.random((400, 785)) < 0.2)   # sparse non-negative, like pixels
    hp = published_hyperplanes(16, 4, x, seed=2, median_init=True)
    w = hp.normals.reshape(-1, 785)
    full = projections(x, w)
    assert full.dtype == np.float32
    rows = np.concatenate([projections(x[i:i + 1], w) for i in range(len(x))])
    np.testing.assert_array_equal(full, rows)
    np.testing.assert_array_equal(projections(x[::-1], w)[::-1], full)
    exact = np.array([[float(np.sum(np.float32(a).astype(np.float64) * b.astype(np.float64))) for b in w] for a in x[:5]])
    np.testing.assert_array_equal(full[:5], exact.astype(np.float32))
    # the contexts follow the same rule, and the median offsets halve the pool under it
    np.testing.assert_array_equal(hp.local_contexts(x), hp.local_contexts(x[::-1])[::-1])
    assert np.all((full > hp.offsets.reshape(-1)).sum(0) == 200)
