"""The bit order of the context index (issue 27; protocol section 3 and section 10, "Bit order of the
context index"): the k bits [w_j . x > b_j] read as a binary number with hyperplane 0 the MOST
significant bit, c = sum_j 2^(k-1-j) bit_j, as the published code's lookup table
`itertools.product([0, 1], repeat=k)` numbers them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gbcli.config import validate
from gbcli.models.gating import (Hyperplanes, context_index, context_sides, projections, published_hyperplanes,
                                 sample_hyperplanes)
from gbcli.runs.stages import build_design, prepare


def published_table(k: int) -> list[tuple[int, ...]]:
    """The published code's lookup table: context c is the side pattern table[c]."""
    return list(itertools.product([0, 1], repeat=k))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])   # our draws, the published (float32) draws
def test_two_hyperplanes_hyperplane_zero_is_the_most_significant_bit(dtype):
    """k = 2, hyperplane 0 = [x_0 > 0], hyperplane 1 = [x_1 > 0]: the positive side of hyperplane 0
    only is context 2 (binary 10), of hyperplane 1 only context 1 (binary 01)."""
    hp = Hyperplanes(np.array([[[1.0, 0.0], [0.0, 1.0]]], dtype=dtype), np.zeros((1, 2), dtype=dtype))
    x = np.array([[1.0, -1.0], [-1.0, 1.0], [1.0, 1.0], [-1.0, -1.0]])
    assert hp.local_contexts(x)[:, 0].tolist() == [2, 1, 3, 0]
    assert context_index(np.array([[1, 0], [0, 1]])).tolist() == [2, 1]
    assert context_sides(np.array([2, 1]), 2).tolist() == [[1, 0], [0, 1]]


@pytest.mark.parametrize("k", [0, 1, 2, 3, 5])
def test_contexts_are_the_published_lookup_table(k):
    """For random draws of both kinds, every unit's context is the index of its side pattern in the
    published table, and `context_sides` reads the sides back."""
    rng = np.random.default_rng(k)
    x = rng.standard_normal((300, 12))
    table = published_table(k)
    for draw in (sample_hyperplanes, published_hyperplanes):
        hp = draw(4, 2 ** k, x, seed=k + 1)
        ctx = hp.local_contexts(x)
        sides = (projections(x, hp.normals.reshape(4 * k, x.shape[1])) > hp.offsets.reshape(-1)).reshape(len(x), 4, k)
        expected = np.array([[table.index(tuple(int(b) for b in s)) for s in row] for row in sides]).reshape(ctx.shape)
        np.testing.assert_array_equal(ctx, expected)
        np.testing.assert_array_equal(context_sides(ctx, k), sides.astype(np.int64))
        assert ctx.dtype == np.int64


def test_svm_gln_reference_pairs_contexts_as_the_published_code():
    """End to end at C = 4 and H = 3 (not a multiple of C, so the grouping depends on the order):
    svm-gln-reference's groups are the rows {i, i+H, i+2H, ...} of r = h C + c with c the published
    table's index. Which (unit, side pattern) each row of the design gates is read off the data (the
    sides of the training points it gates, from the normals), not from the context index."""
    units, count, k = 3, 4, 2
    cfg = validate({"dataset": {"name": "digits", "train_size": 300, "val_size": 200, "data_seed": 1},
                    "model": {"kind": "gln", "hidden_units": units},
                    "contexts": {"count": count, "seed": 2, "draws": "published"},
                    "svm": {"objectives": ["svm-gln-reference"]}}, "test")
    problem = prepare(cfg)
    design = build_design("svm-gln-reference", cfg, problem)
    hp = problem.hyperplanes
    x = problem.dataset.x_train
    # each hyperplane's side, computed as gating computes it (float32 for the published draws)
    sides = (projections(x, hp.normals.reshape(units * k, -1)) > hp.offsets.reshape(-1)).reshape(-1, units, k)
    meaning = {}   # row -> (unit, side pattern) of the training points it gates
    for r in range(units * count):
        on = design.e_train[:, r] == 1
        assert on.any(), f"row {r} gates no training point: pick another seed"
        h = r // count   # one_hot's column layout: unit h owns columns h*C .. h*C + C-1
        patterns = {tuple(int(b) for b in s) for s in sides[on, h]}
        assert len(patterns) == 1, (r, patterns)
        meaning[r] = (h, patterns.pop())
    table = published_table(k)
    published = [{(r // count, table[r % count]) for r in range(i, units * count, units)} for i in range(units)]
    assert [{meaning[int(r)] for r in g} for g in design.groups] == published
    # written out: the first group pairs unit 0's contexts 00 and 11 with unit 1's 10 and unit 2's 01
    assert published[0] == {(0, (0, 0)), (0, (1, 1)), (1, (1, 0)), (2, (0, 1))}
