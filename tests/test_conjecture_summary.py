"""scripts/conjecture_summary.py, the numbers of results/conjecture/: the rates are fitted per seed
from the lr drop on, with intervals over the seeds and the lag-1 autocorrelation of the residuals;
the committed rate tables are what the committed trajectories give; every number of the README is
read from the tables (and a number typed into its template fails); and the power iteration's top
Hessian eigenvalue (the stable step of the warm run) is the dense Hessian's, on a small GLN where the
whole Hessian can be formed."""

from __future__ import annotations

import importlib.util
import io
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import t as student_t

from gbcli.config import load_config
from gbcli.runs.stages import build_model, prepare
from gbcli.training.losses import log_mean_loss

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("conjecture_summary", REPO / "scripts" / "conjecture_summary.py")
summary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summary)


RESULTS = REPO / "results" / "conjecture"
KEY = {"sweep": "conjecture-sgd", "regime": "sgd", "train_size": 48000, "hidden_units": 50, "contexts": 2}


def _schedule(drop: int, seeds=(1, 2, 3)) -> pd.DataFrame:
    return pd.DataFrame([{**KEY, "seed": s, "drop_step": drop, "val_size": 12000} for s in seeds])


def _kinked(drop: int, before: float, after: float, seeds=(1, 2, 3), scale=0.05) -> pd.DataFrame:
    """A power law whose exponent changes at `drop` (continuous there), at log-spaced steps that
    include the drop itself; seed k scaled by 1 + k / 10. The margin ratio is made so that its gap
    to 1 follows the same law."""
    steps = np.unique(np.concatenate([np.logspace(2, math.log10(3e6), 50).astype(int), [drop]]))
    rows = []
    for seed in seeds:
        for step in steps:
            law = scale * (1 + seed / 10) * (min(step, drop) / 100) ** before * (max(step, drop) / drop) ** after
            rows.append({**KEY, "seed": seed, "step": int(step), "train_error": 0.0,
                         "inconsistency_svm_gln": law, "margin_ratio_svm_gln": 1 - law})
    return pd.DataFrame(rows)


def test_the_per_seed_fit_starts_at_the_lr_drop():
    drop = 1_500_000
    seeds = summary.rate_seeds(_kinked(drop, before=-0.5, after=-0.1), _schedule(drop))
    after = seeds[(seeds.window == "after_drop") & (seeds.quantity == "inconsistency_svm_gln")]
    assert len(after) == 3 and (after.start == drop).all() and (after.first_step == drop).all()
    assert np.allclose(after.slope, -0.1, atol=1e-9)          # only the steps at the final lr
    decade = seeds[(seeds.window == "last_decade") & (seeds.quantity == "inconsistency_svm_gln")]
    assert (decade.slope < -0.1 - 1e-3).all()                  # the last decade straddles the drop
    moved = summary.rate_seeds(_kinked(drop, -0.5, -0.1), _schedule(drop // 2))
    assert not np.allclose(moved[moved.window == "after_drop"].slope, -0.1, atol=1e-4)


def test_the_lr_drop_is_the_milestone_times_the_steps_of_an_epoch():
    sched = summary.schedules()
    drops = {name: set(g.drop_step) for name, g in sched.groupby("sweep")}
    # the paper's schedule drops the lr at half: 4,000 of 8,000 epochs of ceil(48,000 / 128) steps
    assert drops["conjecture-sgd"] == {4000 * 375}
    assert drops["conjecture-fig2"] == {1000 * 16}       # 2,000 epochs of ceil(2000 / 128) steps
    assert drops["conjecture-warm"] == drops["conjecture-fig2-warm"] == {0}   # no milestones


def test_unseparated_steps_are_not_fitted():
    traj = _kinked(1_500_000, -0.5, -0.1).assign(train_error=0.01)
    fit = summary.rate(summary.rate_seeds(traj, _schedule(1_500_000)))
    assert len(fit) == 4 and fit.note.str.contains("fewer than 3").all() and "slope" not in fit


def test_the_interval_is_over_the_seeds_slopes():
    rows = []
    for seed, slope in ((1, -0.1), (2, -0.2), (3, -0.45)):
        for step in np.unique(np.logspace(5, 6, 12).astype(int)):
            rows.append({**KEY, "seed": seed, "step": int(step), "train_error": 0.0,
                         "inconsistency_svm_gln": 0.02 * (step / 1e5) ** slope, "margin_ratio_svm_gln": 0.5})
    seeds = summary.rate_seeds(pd.DataFrame(rows), _schedule(0))
    fit = summary.rate(seeds).set_index("quantity").loc["inconsistency_svm_gln"]
    slopes = np.array([-0.1, -0.2, -0.45])
    se = slopes.std(ddof=1) / math.sqrt(3)
    half = student_t.ppf(0.975, 2) * se
    assert fit.slope == pytest.approx(slopes.mean(), abs=1e-9) and fit.slope_se == pytest.approx(se, rel=1e-9)
    assert (fit.slope_lo, fit.slope_hi) == pytest.approx((slopes.mean() - half, slopes.mean() + half), rel=1e-9)
    last = int(max(r["step"] for r in rows))
    now = np.mean([0.02 * (last / 1e5) ** b for b in slopes])
    assert fit.fitted_last == pytest.approx(now, rel=1e-9)
    assert fit.at_decade_past == pytest.approx(now * 10 ** slopes.mean(), rel=1e-9)   # one decade on, no further
    assert fit.decade_past == 10 * last and not fit.target_within_decade


def test_the_lag1_autocorrelation_is_of_the_fits_residuals():
    x = np.linspace(4, 6, 11)
    gen = np.random.default_rng(3)
    design = np.column_stack([np.ones_like(x), x])
    e = gen.normal(size=x.size)
    e -= design @ np.linalg.lstsq(design, e, rcond=None)[0]       # residuals a line cannot absorb
    e *= 0.01 / np.abs(e).max()
    fit = summary.fit_seed(10 ** x, 10 ** (-1.5 - 0.2 * x + e))
    assert fit["slope"] == pytest.approx(-0.2, abs=1e-12)
    assert fit["lag1"] == pytest.approx(float(e[1:] @ e[:-1] / (e @ e)), rel=1e-9)
    assert math.isnan(summary.fit_seed(10 ** x[:3], 10 ** (-0.2 * x[:3]))["lag1"])


def test_the_committed_rates_are_what_the_committed_trajectories_give():
    sched = summary.schedules()
    traj = summary.with_sweep(pd.concat([pd.read_csv(RESULTS / "tables" / "trajectory.csv"),
                                         pd.read_csv(RESULTS / "tables" / "fig2_trajectory.csv")], ignore_index=True), sched)
    seeds = summary.rate_seeds(traj, sched)
    for name, made in (("rate_seeds", seeds), ("rate", summary.rate(seeds, summary.pooled(traj, sched))),
                       ("drop", summary.drop_counts(traj, sched))):
        committed = pd.read_csv(RESULTS / "tables" / f"{name}.csv")
        made = pd.read_csv(io.StringIO(made.to_csv(index=False)))   # as it reads back
        pd.testing.assert_frame_equal(committed, made, check_dtype=False, rtol=1e-9)


def test_a_trajectory_row_gets_the_one_sweep_its_config_names():
    sched = summary.schedules()
    traj = pd.read_csv(RESULTS / "tables" / "trajectory.csv")
    got = summary.with_sweep(traj, sched)
    assert len(got) == len(traj)
    assert set(got[got.regime == "warm"].groupby("train_size").sweep.unique().map(tuple)) == {
        ("conjecture-warm",), ("conjecture-fig2-warm",)}
    with pytest.raises(ValueError, match="no conjecture config"):
        summary.with_sweep(traj.assign(seed=9), sched)
    twice = pd.concat([sched, sched.assign(sweep="conjecture-other")])
    with pytest.raises(ValueError, match="same regime"):
        summary.with_sweep(traj, twice)


def test_a_summary_of_some_sweeps_keeps_the_committed_rows_of_the_others(tmp_path):
    committed = pd.read_csv(RESULTS / "tables" / "trajectory.csv")
    path = tmp_path / "trajectory.csv"
    committed.to_csv(path, index=False)
    made = summary.with_sweep(committed, summary.schedules())
    made = made[made.sweep == "conjecture-warm"].assign(kkt_residual=1e-3).iloc[:5]
    got = summary.kept(path, made)
    warm = got[got.sweep == "conjecture-warm"]
    assert len(warm) == 5 and (warm.kkt_residual == 1e-3).all()            # the new rows replace the sweep's
    others = summary.with_sweep(committed, summary.schedules())
    assert len(got) - 5 == (others.sweep != "conjecture-warm").sum()       # the rest are kept
    assert summary.kept(tmp_path / "none.csv", made) is made


def test_span_carries_svm_l2_in_its_own_geometry_only():
    span = pd.read_csv(RESULTS / "tables" / "span.csv")
    last = pd.read_csv(RESULTS / "tables" / "last_angles.csv").set_index("point")
    assert "angle_in_span_svm_l2" not in span
    assert np.allclose(span.angle_svm_l2, last.loc[span.point, "angle_svm_l2"])
    assert not np.allclose(span.angle_svm_l2, last.loc[span.point, "angle_svm_l2_recorded"], atol=1)


def test_every_number_of_the_readme_is_read_from_the_tables():
    template = summary.TEMPLATE.read_text()
    assert summary.unbacked_numbers(template, summary.config_constants(summary.schedules())) == []
    readme = (RESULTS / "README.md").read_text()
    assert readme == summary.render(template, summary.facts(RESULTS))


def test_a_number_typed_into_the_readme_fails(tmp_path):
    allowed = summary.config_constants(summary.schedules())
    assert summary.unbacked_numbers("it needs about 8 x 10^6 steps", allowed) == ["8", "10", "6"]
    assert summary.unbacked_numbers("slope t^-0.038 and {{sgd_after_mean}} in `runs/x-7`", allowed) == ["0.038"]
    assert summary.unbacked_numbers("H = 50, N = 48,000, seeds 1-3, lr 0.04", allowed) == []
    with pytest.raises(KeyError, match="no_such_fact"):
        summary.render("{{no_such_fact}}", summary.facts(RESULTS))


def test_a_changed_table_changes_the_readme(tmp_path):
    shutil.copytree(RESULTS / "tables", tmp_path / "tables")
    drop = pd.read_csv(tmp_path / "tables" / "drop.csv")
    row = drop.index[(drop.train_size == 48000) & (drop.seed == 2)][0]
    drop.loc[row, "disagree_svm_gln_end"] = 999
    drop.to_csv(tmp_path / "tables" / "drop.csv", index=False)
    before, after = summary.facts(RESULTS), summary.facts(tmp_path)
    assert "175 -> 999" in after["sgd_disagree"] and before["sgd_disagree"] != after["sgd_disagree"]
    assert {k for k in before if before[k] != after[k]} == {"sgd_disagree"}


def test_the_power_iteration_finds_the_dense_hessians_top_eigenvalue():
    cfg = load_config(REPO / "configs" / "quickstart.yaml",
                      ["model.hidden_units=3", "dataset.train_size=60", "dataset.val_size=20", "model.output_bias=false"])
    problem = prepare(cfg)
    ds = problem.dataset
    torch.manual_seed(0)
    model = build_model(cfg, ds.dim).double()
    x, y = torch.tensor(np.array(ds.x_train, dtype=np.float64)), torch.tensor(np.array(ds.y_train, dtype=np.float64))
    ctx = torch.as_tensor(problem.ctx_train)
    log_r, lam = summary.top_eigenvalue(model, x, y, ctx, "logistic", iters=300)
    params = list(model.parameters())
    shapes = [p.shape for p in params]
    flat = torch.cat([p.detach().reshape(-1) for p in params])

    def f(theta):
        out, i = {}, 0
        for (name, _), shape in zip(model.named_parameters(), shapes):
            n = math.prod(shape)
            out[name] = theta[i:i + n].reshape(shape)
            i += n
        return log_mean_loss(y * torch.func.functional_call(model, out, (x, ctx)), "logistic")

    dense = torch.autograd.functional.hessian(f, flat)
    eig = torch.linalg.eigvalsh(dense)
    top = float(eig[eig.abs().argmax()])            # power iteration finds the largest in magnitude
    assert log_r == pytest.approx(float(f(flat)), rel=1e-12)
    assert lam == pytest.approx(top, rel=1e-4)
