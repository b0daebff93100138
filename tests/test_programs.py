"""The mathematics of the convex programs (protocol section 5), checked against definitions."""

import itertools

import cvxpy as cp
import numpy as np
import pytest

from gbcli.programs.design import one_hot
from gbcli.programs import (GatedDesign, context_mean, count_groups_matrix, decision, norm_of, reference_groups,
                            reference_matrix, solve_primal, unit_groups)


def l2_root(units, count):
    """A square root of Mt (Mt[(h,c),(h',c')] = 1 + C[h=h'][c=c'] - [h=h']): A = J/sqrt(HC) + sqrt(C)(I - P)."""
    r = units * count
    return np.ones((r, r)) / np.sqrt(r) + np.sqrt(count) * (np.eye(r) - context_mean(units, count).toarray())


def all_predictors(zeta, units, count):
    """beta_gamma = sum_h zeta[h*C + gamma_h] for every global context gamma, by enumeration."""
    return {g: sum(zeta[h * count + g[h]] for h in range(units))
            for g in itertools.product(range(count), repeat=units)}


def mt(units, count):
    i = np.arange(units * count)
    same_h = (i[:, None] // count == i[None, :] // count)
    return 1.0 + count * np.eye(units * count) - same_h


def tiny_design(norm, units, count, n=40, dim=6, seed=0, groups=None):
    """Random inputs, random contexts, labels from a random gated teacher (so the data is separable)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n + 200, dim))
    ctx = rng.integers(0, count, size=(n + 200, units))
    e = one_hot(ctx, count)
    y = np.sign(decision(rng.normal(size=(units * count, dim)), x, e))
    groups = unit_groups(units, count) if groups is None else groups
    return GatedDesign(x[:n], y[:n], e[:n], x[n:], e[n:], norm, groups, units, count), ctx


@pytest.mark.parametrize("units,count", [(2, 2), (3, 2), (2, 4), (4, 2), (3, 4)])
def test_l2_norm_is_the_sum_over_all_global_contexts(units, count):
    zeta = np.random.default_rng(units * 10 + count).normal(size=(units * count, 5))
    brute = sum(float(b @ b) for b in all_predictors(zeta, units, count).values())
    design = GatedDesign(np.zeros((1, 5)), np.ones(1), np.zeros((1, units * count)), np.zeros((1, 5)),
                         np.zeros((1, units * count)), "l2", units=units, count=count)
    assert norm_of(design).value(design, zeta) * count ** (units - 2) == pytest.approx(brute, rel=1e-10)


@pytest.mark.parametrize("units,count", [(2, 2), (3, 2), (2, 4), (5, 4)])
def test_l2_root_squares_to_m_and_the_appendix_formula_does_not(units, count):
    a = l2_root(units, count)
    np.testing.assert_allclose(a @ a, mt(units, count), atol=1e-12)
    np.testing.assert_allclose(a, a.T)
    # GLN paper eq. 23/25: A = J/(HC) - [h=h'] + C I is not a square root of M (protocol section 5).
    r = units * count
    appendix = np.ones((r, r)) / r - (np.arange(r)[:, None] // count == np.arange(r)[None, :] // count) + count * np.eye(r)
    assert np.abs(appendix @ appendix - mt(units, count)).max() > 0.5


@pytest.mark.filterwarnings("ignore:Solution may be inaccurate")
@pytest.mark.parametrize("units,count", [(2, 2), (3, 2), (2, 4)])
def test_svm_l2_optimum_equals_brute_force_program_over_all_predictors(units, count):
    design, _ = tiny_design("l2", units, count, seed=units + count)
    sol = solve_primal(design, "clarabel", eps=1e-8)
    assert sol.status == "optimal"
    # the same program written over all C^H predictors explicitly
    z = cp.Variable((units * count, design.x_train.shape[1]))
    gammas = list(itertools.product(range(count), repeat=units))
    b = np.array([[1.0 if g[h] == c else 0.0 for h in range(units) for c in range(count)] for g in gammas])
    f = cp.sum(cp.multiply(design.e_train, design.x_train @ z.T), axis=1)
    brute = cp.Problem(cp.Minimize(cp.sum_squares(b @ z)), [cp.multiply(design.y_train, f) >= 1])
    brute.solve(solver="CLARABEL")
    assert sol.value * count ** (units - 2) == pytest.approx(brute.value, rel=1e-6)
    margins = design.y_train * decision(sol.zeta, design.x_train, design.e_train)
    assert margins.min() >= 1 - 1e-6


def gln_norm_closed_form(zeta):
    """GLN paper Proposition B.9 (H = C = 2), with beta_ij = zeta_1i + zeta_2j."""
    b = {(i, j): zeta[i] + zeta[2 + j] for i in (0, 1) for j in (0, 1)}
    n = np.linalg.norm
    return np.sqrt((n(b[0, 0] - b[0, 1]) + n(b[0, 0] - b[1, 0])) ** 2 + n(b[0, 1] + b[1, 0]) ** 2)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gln_norm_closed_form_equals_solver_optimum(seed):
    design, _ = tiny_design("group", 2, 2, seed=seed)
    sol = solve_primal(design, "clarabel", eps=1e-8)
    assert sol.status == "optimal"
    # At the optimum zeta also solves the inner problem min sum_h ||zeta_h|| s.t. its own beta,
    # whose value is ||beta||_GLN / sqrt(2) by Proposition B.9.
    assert sol.value == pytest.approx(gln_norm_closed_form(sol.zeta) / np.sqrt(2), rel=1e-5)


def test_reference_variants_group_rows_column_major():
    units, count, dim = 3, 2, 4
    assert [g.tolist() for g in reference_groups(units, count)] == [[0, 3], [1, 4], [2, 5]]
    assert [g.tolist() for g in unit_groups(units, count)] == [[0, 1], [2, 3], [4, 5]]
    zeta = np.random.default_rng(0).normal(size=(units * count, dim))
    # what a Fortran-order reshape of the (HC) x D variable into H groups does
    fortran = np.reshape(zeta, (units, count * dim), order="F")
    design = GatedDesign(np.zeros((1, dim)), np.ones(1), np.zeros((1, 6)), np.zeros((1, dim)), np.zeros((1, 6)),
                         "group", reference_groups(units, count), units, count)
    assert norm_of(design).value(design, zeta) == pytest.approx(np.linalg.norm(fortran, axis=1).sum())
    # reference svm-l2: (1/HC) S - T + C Z, T the Fortran-reshape "sum over contexts" broadcast back
    z3 = np.reshape(zeta, (units, count, dim), order="F")
    t = np.reshape(np.repeat(z3.sum(1, keepdims=True), count, axis=1), (units * count, dim), order="F")
    ref = zeta.sum(0) / (units * count) - t + count * zeta
    design.norm = "l2-reference"
    assert norm_of(design).value(design, zeta) == pytest.approx((ref ** 2).sum())
    np.testing.assert_allclose(reference_matrix(units, count) @ zeta, ref)


@pytest.mark.parametrize("units,count", [(2, 2), (3, 2), (10, 2), (4, 4)])
def test_reference_l2_decomposition_and_null_space(units, count):
    """The solver's form ||(C I - T) Z||^2 + ||s||^2/HC equals ||A_ref Z||^2, and A_ref is singular
    (its null space, dimension H-1 per input coordinate, changes the predictor)."""
    r = units * count
    zeta = np.random.default_rng(r).normal(size=(r, 3))
    t = count_groups_matrix(units, count)
    lhs = (((count * np.eye(r) - t) @ zeta) ** 2).sum() + (zeta.sum(0) ** 2).sum() / r
    assert lhs == pytest.approx(((reference_matrix(units, count) @ zeta) ** 2).sum())
    eig = np.linalg.eigvalsh(reference_matrix(units, count).T @ reference_matrix(units, count))
    assert (eig < 1e-9).sum() == units - 1
    # the correct M is only singular along the H-1 directions that leave every predictor unchanged
    assert (np.linalg.eigvalsh(mt(units, count)) < 1e-9).sum() == units - 1
    p = context_mean(units, count).toarray()
    assert np.allclose(p @ p, p)


def test_failed_solve_is_recorded_not_raised():
    design, _ = tiny_design("group", 2, 2)
    sol = solve_primal(design, "ecos", max_iters=1)
    assert sol.status in ("failed", "inaccurate")


def test_non_separable_data_is_infeasible():
    x = np.array([[1.0, 0.0], [1.0, 0.0]])
    design = GatedDesign(x, np.array([1.0, -1.0]), np.ones((2, 1)), x, np.ones((2, 1)), "sq")
    sol = solve_primal(design, "clarabel")
    assert sol.status == "infeasible" and sol.zeta is None


@pytest.mark.parametrize("norm", ["sq", "l2", "group", "l1", "l2-reference"])
def test_the_input_radius_bounds_every_output_and_is_attained(norm):
    """input_radius R bounds |f(x_n)| <= ||zeta|| R for every zeta (a dual ray's relative margin
    bound divides by it: a radius too small would claim too much). Gates of 2 (not one-hot 1) tell
    a product from a quotient. The bound is checked on random predictors and on those that attain
    it for the Euclidean and l1 geometry (one gated input, one coordinate) and for the quadratic
    forms (zeta = P e_n x_n', P the form's pseudo-inverse). The published code's form is a seminorm:
    it bounds the outputs of the predictors off its null space, the only ones its dual certifies."""
    from gbcli.programs.norms import context_pinv, norm_of, reference_null_and_pinv

    base, _ = tiny_design(norm, 3, 2, seed=5)
    d = GatedDesign(base.x_train, base.y_train, 2.0 * base.e_train, base.x_val, 2.0 * base.e_val, norm, base.groups,
                    base.units, base.count)
    nrm = norm_of(d)
    radius = nrm.input_radius(d)
    rng = np.random.default_rng(0)
    zetas = [rng.normal(size=(d.rows, d.x_train.shape[1])) for _ in range(50)]
    zetas += [np.outer(d.e_train[n], d.x_train[n]) for n in range(len(d.x_train))]   # Euclidean alignment
    vertex = np.zeros((d.rows, d.x_train.shape[1]))
    n, r, k = np.unravel_index(np.argmax(np.abs(d.e_train)[:, :, None] * np.abs(d.x_train)[:, None, :]),
                               (len(d.x_train), d.rows, d.x_train.shape[1]))
    vertex[r, k] = 1.0
    zetas.append(vertex)
    if norm in ("l2", "l2-reference"):
        null, pinv = (np.zeros((d.rows, 0)), context_pinv(d.units, d.count)) if norm == "l2" \
            else reference_null_and_pinv(d.units, d.count)
        zetas = [z - null @ (null.T @ z) for z in zetas]
        zetas += [pinv @ np.outer(d.e_train[n], d.x_train[n]) for n in range(len(d.x_train))]
    ratios = []
    for zeta in zetas:
        size = nrm.value(d, zeta)
        size = np.sqrt(size) if nrm.quadratic else size
        ratios.append(np.abs(decision(zeta, d.x_train, d.e_train)).max() / size)
    assert max(ratios) <= radius * (1 + 1e-9), (max(ratios), radius)
    if norm != "group":   # their radius is exact: an aligned predictor reaches it
        assert max(ratios) >= radius * (1 - 1e-9), (max(ratios), radius)


def test_group_norms_refuse_groups_that_overlap_or_miss_a_column():
    import torch

    from gbcli.programs.norms import norm_of

    base, _ = tiny_design("group", 3, 2, seed=1)
    for groups, says in (([[0, 1], [1, 2], [3, 4, 5]], "group 1 shares gate columns"),
                         ([[0, 1], [2, 3], [4]], "gate columns [5] are in no group")):
        d = GatedDesign(base.x_train, base.y_train, base.e_train, base.x_val, base.e_val, "group",
                        [np.array(g) for g in groups], base.units, base.count)
        with pytest.raises(ValueError, match=says.replace("[", r"\[").replace("]", r"\]")):
            norm_of(d).kernel(d, torch.ones(len(d.x_train), len(d.x_train), dtype=torch.float64),
                              torch.as_tensor(d.e_train))


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e6])
def test_the_reference_dual_is_scale_free(scale):
    """svm-l2-reference's dual norm certifies V only off the null space of A_ref, judged relative to
    |V|: a V with a rounding-size null component certifies at every scale, and scales with it."""
    from gbcli.programs.norms import norm_of, reference_null_and_pinv

    d, _ = tiny_design("l2-reference", 3, 2, seed=2)
    null, _ = reference_null_and_pinv(3, 2)
    rng = np.random.default_rng(3)
    v = rng.normal(size=(d.rows, d.x_train.shape[1]))
    v -= null @ (null.T @ v)                                      # off the null space
    noisy = v + 1e-12 * np.linalg.norm(v) * (null @ rng.normal(size=(null.shape[1], v.shape[1])))
    nrm = norm_of(d)
    assert nrm.dual(d, scale * noisy) == pytest.approx(scale * nrm.dual(d, v), rel=1e-9)
    assert np.isnan(nrm.dual(d, scale * (v + 1e-3 * np.linalg.norm(v) * null[:, :1] @ np.ones((1, v.shape[1])))))
