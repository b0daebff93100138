"""End to end: train the GD networks, solve their programs, build the tables."""

import itertools

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from gbcli.config import load_config
from gbcli.runs.stages import build_model
from gbcli.runs.stages import fit_svm, prepare, train_gd
from gbcli.runs.sweep import run_sweep
from gbcli.reports.tables import write_tables
from gbcli.runs.compare import compare

import forked_gb


def write_config(tmp_path, body: dict, name="cfg"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


DIGITS = {"name": "digits", "train_size": 300, "val_size": 600}


def quiet(*_):
    pass


@pytest.mark.slow
def test_mnist_gln_end_to_end_through_the_cli(tmp_path, shared_data_dir):
    cfg = write_config(tmp_path, {
        "preset": "paper", "dataset": {"train_size": 200},
        "model": {"kind": "gln", "hidden_units": 5}, "contexts": {"count": 2, "seed": 1},
        "svm": {"objectives": ["svm-gln", "svm-l2"]}})
    env = {"GB_DATA_DIR": str(shared_data_dir), "PATH": "/usr/bin:/bin"}
    for args in (["train-gd", str(cfg), "-q"], ["fit-svm", str(cfg), "-q"], ["compare", "runs/cfg"]):
        proc = forked_gb.run(args, tmp_path, env, argv0=forked_gb.CLI)   # forked from a process that imported gb
        assert proc.returncode == 0, proc.stderr
    errors = pd.read_csv(tmp_path / "runs/cfg/tables/errors.csv")
    incons = pd.read_csv(tmp_path / "runs/cfg/tables/inconsistency.csv")
    assert list(errors.predictor) == ["gd-gln", "svm-gln", "svm-l2"]
    assert (errors.train_size == 200).all() and (errors.hidden_units == 5).all() and (errors.contexts == 2).all()
    assert (errors.train_error == 0).all()          # separable: everyone fits the training set
    assert (errors.val_error < 0.3).all()           # and generalizes far better than chance
    svm = errors[errors.predictor != "gd-gln"]
    assert (svm.status == "optimal").all() and (svm.min_margin > 1 - 1e-4).all()
    gd = errors.set_index("predictor").val_error["gd-gln"]
    assert abs(errors.set_index("predictor").val_error["svm-gln"] - gd) < 0.05
    assert set(incons.predictor_a) == {"svm-gln", "svm-l2"} and (incons.predictor_b == "gd-gln").all()
    p = incons.gd_val_error
    np.testing.assert_allclose(incons.expected_if_uncorrelated, 2 * p * (1 - p))
    # the inconsistency is recomputed from the saved validation predictions
    gd_out = np.load(tmp_path / "runs/cfg/gd/predictions.npz")["val_out"]
    svm_out = np.load(tmp_path / "runs/cfg/svm/svm-gln/predictions.npz")["val_out"]
    assert incons.set_index("predictor_a").inconsistency["svm-gln"] == np.mean(np.sign(gd_out) != np.sign(svm_out))
    assert (incons.inconsistency < incons.expected_if_uncorrelated).all()
    saved = yaml.safe_load((tmp_path / "runs/cfg/gd/config.yaml").read_text())
    assert saved["training"]["epochs"] == 2000 and saved["training"]["lr_milestones"] == [1000]
    metrics = pd.read_csv(tmp_path / "runs/cfg/gd/metrics.csv")
    assert len(metrics) >= 50 and metrics.step.iloc[-1] == 4000
    assert list(metrics.lr.unique()) == [0.04, 0.01]


def test_same_config_twice_gives_identical_metrics(tmp_path):
    cfg = write_config(tmp_path, {"dataset": DIGITS, "model": {"kind": "gln", "hidden_units": 4},
                                  "training": {"epochs": 5, "momentum": 0.9}})
    c = load_config(cfg)
    train_gd(c, tmp_path / "a", progress=False)
    train_gd(c, tmp_path / "b", progress=False)
    assert (tmp_path / "a/gd/metrics.csv").read_bytes() == (tmp_path / "b/gd/metrics.csv").read_bytes()
    c2 = load_config(cfg, ["training.batch_seed=2"])
    train_gd(c2, tmp_path / "c", progress=False)
    assert (tmp_path / "a/gd/metrics.csv").read_bytes() != (tmp_path / "c/gd/metrics.csv").read_bytes()


def trained_gln(tmp_path, units, count):
    cfg = load_config(write_config(tmp_path, {"dataset": DIGITS, "model": {"kind": "gln", "hidden_units": units},
                                              "contexts": {"count": count}, "training": {"epochs": 20}}))
    problem = prepare(cfg)
    model = build_model(cfg, problem.dataset.dim)
    train_gd(cfg, tmp_path / "run", progress=False, problem=problem)
    sd = torch.load(tmp_path / "run/gd/model.pt", weights_only=False)["state_dict"]
    model.load_state_dict(sd)
    return model, problem


def test_trained_gln_predictors_are_equivariant(tmp_path):
    model, problem = trained_gln(tmp_path, 2, 2)
    zeta = model.zeta().double().numpy()
    beta = {(i, j): zeta[i] + zeta[2 + j] for i in (0, 1) for j in (0, 1)}
    # GLN paper eq. 16: beta_21 - beta_22 = beta_11 - beta_12 (contexts numbered from 0 here)
    np.testing.assert_allclose(beta[1, 0] - beta[1, 1], beta[0, 0] - beta[0, 1], atol=1e-5)
    # and the network's outputs are <beta_gamma(x), x> (+ bias)
    x = problem.dataset.x_val[:50]
    ctx = problem.ctx_val[:50]
    with torch.no_grad():
        out = model(torch.tensor(x, dtype=torch.float32), torch.tensor(ctx)).double().numpy()
    f = np.array([beta[tuple(c)] @ xi for c, xi in zip(ctx, x)]) + float(model.bias.detach())
    np.testing.assert_allclose(out, f, rtol=1e-4, atol=1e-4)
    assert np.abs(beta[0, 0] - beta[1, 1]).max() > 1e-3   # not trivially all equal


def test_trained_gln_spans_only_c_minus_one_h_plus_one_predictors(tmp_path):
    units, count = 3, 4
    model, _ = trained_gln(tmp_path, units, count)
    zeta = model.zeta().double().numpy()
    betas = np.array([sum(zeta[h * count + g[h]] for h in range(units))
                      for g in itertools.product(range(count), repeat=units)])   # C^H x D
    s = np.linalg.svd(betas, compute_uv=False)
    free = (count - 1) * units + 1
    assert betas.shape[0] == 64 > free
    assert s[free - 1] > 1e-3 * s[0] and s[free] < 1e-6 * s[0]


@pytest.mark.parametrize("kind", ["shallow", "frelu", "linear"])
def test_other_models_train_and_match_their_programs(tmp_path, kind):
    model = {"kind": kind}
    if kind == "frelu":
        model.update(hidden_units=8, freeze_gates_after=20)
    objectives = {"shallow": ["svm-shallow"], "frelu": ["svm-rc", "svm-lc"], "linear": ["svm-shallow"]}[kind]
    # digits are not linearly separable: the linear model gets a linear teacher
    data = {"name": "linear-teacher", "train_size": 200, "val_size": 300, "dim": 10} if kind == "linear" else DIGITS
    cfg = load_config(write_config(tmp_path, {"dataset": data, "model": model, "contexts": {"count": 4},
                                              "training": {"epochs": 150, "lr": 0.1}, "svm": {"objectives": objectives}}))
    s = train_gd(cfg, tmp_path / "run", progress=False)
    assert s["predictor"] == f"gd-{kind}" and s["val_error"] < 0.3
    results = fit_svm(cfg, tmp_path / "run", progress=False, echo=quiet)
    for r in results:
        assert r["status"] == "optimal" and r["min_margin"] > 1 - 1e-4, r
    errors, incons = compare(tmp_path / "run")
    assert len(errors) == 1 + len(objectives) and len(incons) == len(objectives)


def test_relu_programs_read_the_trained_network(tmp_path):
    cfg = load_config(write_config(tmp_path, {
        "dataset": DIGITS, "model": {"kind": "relu", "hidden_units": 20}, "training": {"epochs": 300, "lr": 0.1},
        "svm": {"objectives": ["svm-rc", "svm-lc", "svm-hl", "svm-gates"]}}))
    train_gd(cfg, tmp_path / "run", progress=False)
    results = {r["predictor"]: r for r in fit_svm(cfg, tmp_path / "run", progress=False, echo=quiet)}
    for name in ("svm-rc", "svm-lc", "svm-hl"):
        assert results[name]["status"] == "optimal", results[name]
    assert results["svm-hl"]["train_error"] == 0   # the net separates the data, so its hidden layer does
    # 20 binary gate features do not separate 300 digits: recorded as infeasible, not a crash
    assert results["svm-gates"]["status"] == "infeasible"
    errors, incons = compare(tmp_path / "run")
    write_tables(tmp_path / "run", errors, incons)
    row = errors.set_index("predictor").loc["svm-gates"]
    assert np.isnan(row.val_error) and row.status == "infeasible"
    assert set(incons.predictor_a) == {"svm-rc", "svm-lc", "svm-hl"}
    # svm-hl is a linear classifier on the net's own hidden layer: close to the net
    assert incons.set_index("predictor_a").inconsistency["svm-hl"] < 0.15


@pytest.mark.slow
def test_sweep_runs_every_point_and_skips_finished_ones(tmp_path):
    cfg = write_config(tmp_path, {"name": "grid", "dataset": DIGITS, "model": {"kind": "gln", "hidden_units": 3},
                                  "training": {"epochs": 5}, "svm": {"objectives": ["svm-gln"]},
                                  "grid": {"contexts.seed": [1, 2], "model.hidden_units": [2, 3]}})
    lines = []
    errors, incons, failures = run_sweep(cfg, tmp_path / "out", progress=False, echo=lines.append)
    assert len(failures) == 0 and len(errors) == 8 and len(incons) == 4 and errors.point.nunique() == 4
    assert sorted(set(zip(errors.context_seed, errors.hidden_units))) == [(1, 2), (1, 3), (2, 2), (2, 3)]
    lines.clear()
    errors2, _, _ = run_sweep(cfg, tmp_path / "out", progress=False, echo=lines.append)
    assert lines[0] == "checking the 4 point folders of an earlier run"   # the heal check is named first
    assert "4 points, 4 done, running 0" in lines[1]
    pd.testing.assert_frame_equal(errors, errors2)


@pytest.mark.parametrize("kind", ["logistic", "exponential"])
def test_losses_stay_finite_at_extreme_margins(kind):
    from gbcli.training.losses import loss_fn

    m = torch.tensor([1e4, 5e3, 200.0], requires_grad=True)   # far past float32's exp range
    loss = loss_fn(m, kind)
    loss.backward()
    assert torch.isfinite(loss) and 0 <= float(loss.detach()) < 1e-30 and torch.isfinite(m.grad).all()
    small = torch.tensor([0.0, 1.0, -1.0])
    expected = {"logistic": torch.log1p(torch.exp(-small)).mean(), "exponential": torch.exp(-small).mean()}[kind]
    assert float(loss_fn(small, kind)) == pytest.approx(float(expected))
    if kind == "logistic":  # linear, not overflowing, for very wrong predictions
        assert float(loss_fn(torch.tensor([-1e4]), kind)) == pytest.approx(1e4)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_shallow_gln_trains_only_used_contexts_on_the_dense_trajectory(momentum):
    """restrict() must not change SGD's trajectory: compare with the dense (C, D) weight trained
    by the same steps, on a problem where most contexts hold no training point."""
    from gbcli.models.networks.gln import ShallowGLN
    from gbcli.models.shallow import SPEC

    g = torch.Generator().manual_seed(0)
    count, dim, n = 64, 7, 40
    x, y = torch.randn(n, dim, generator=g), torch.randint(0, 2, (n,), generator=g) * 2.0 - 1
    ctx = torch.randint(0, 10, (n, 1), generator=g)          # contexts 10..63 never used
    xv, cv = torch.randn(30, dim, generator=g), torch.randint(0, count, (30, 1), generator=g)
    dense, sparse = ShallowGLN(count, dim), ShallowGLN(count, dim)
    with torch.no_grad():
        dense.w.normal_(generator=g)
        sparse.w.copy_(dense.w)
    init = dense.w.detach().clone()
    sparse.restrict(ctx, sparse_grad=momentum == 0)
    assert sparse.w.shape[0] == len(torch.unique(ctx))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=momentum) for m in (dense, sparse)]
    for step in range(30):
        idx = torch.arange(step % 4 * 10, step % 4 * 10 + 10)
        for m, opt in zip((dense, sparse), opts):
            loss = torch.nn.functional.softplus(-y[idx] * m(x[idx], ctx[idx])).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.testing.assert_close(SPEC.trained_state(sparse.state_dict(), dim)["w"], dense.w.detach())
    torch.testing.assert_close(sparse(xv, cv), dense(xv, cv))
    moved = (SPEC.trained_state(sparse.state_dict(), dim)["w"] - init).abs().amax(1) > 0
    assert moved[torch.unique(ctx)].all() and not moved[10:].any()
