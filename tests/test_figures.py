"""summarize (mean/std over seeds) and the sweep figures (protocol section 8)."""

from __future__ import annotations

import itertools
import math

import matplotlib.image as mpimg
import matplotlib
import numpy as np
import pandas as pd
import pytest

from gbcli.runs.figures import NAMES, make_figures, plot_sweep
from gbcli.reports.tables import ERROR_COLUMNS, INCONSISTENCY_COLUMNS, summarize

BASE = {"gd-gln": 0.10, "svm-gln": 0.12, "svm-l2": 0.15}


def _val(pred, h, n, seed, mom):
    """Known validation errors: base + 0.01 seed + 0.001 H/10 - 0.02 [N=1000] + 0.005 [momentum 0.9 and GD]."""
    return BASE[pred] + 0.01 * seed + 0.001 * h / 10 - 0.02 * (n == 1000) + 0.005 * (mom == 0.9 and pred == "gd-gln")


def sweep_tables(model="gln", units=(10, 20), gd="gd-gln", svms=("svm-gln", "svm-l2")):
    """A Figure-2-like sweep: units x N in {500, 1000} x context_seed in {1, 2} x momentum in {0, 0.9}.

    One point's svm-l2 failed (H=10, N=500, seed 2, momentum 0) and one svm-gln is inaccurate.
    """
    err, inc = [], []
    for u, n, seed, mom in itertools.product(units, (500, 1000), (1, 2), (0.0, 0.9)):
        h, c = (1, 2 ** u) if model == "shallow" else (u, 2)
        point = f"p{u}-{n}-{seed}-{mom}"
        meta = {"model": model, "hidden_units": h, "contexts": c, "train_size": n, "data_seed": 1,
                "context_seed": seed, "init_seed": seed, "median_init": True, "momentum": mom, "point": point}
        gd_err = _val("gd-gln", u, n, seed, mom)
        err.append({**meta, "predictor": gd, "train_error": 0.0, "val_error": gd_err, "status": "ok"})
        for s in svms:
            v = _val(s if s in BASE else "svm-gln", u, n, seed, mom)
            status = "optimal"
            if s == "svm-l2" and (u, n, seed, mom) == (10, 500, 2, 0.0):
                status, v = "failed", float("nan")
            if s == "svm-gln" and (u, n, seed, mom) == (20, 1000, 1, 0.9):
                status = "inaccurate"
            err.append({**meta, "predictor": s, "train_error": 0.01 * seed, "val_error": v, "status": status,
                        "solver": "dual"})
            if status != "failed":
                inc.append({**meta, "predictor_a": s, "predictor_b": gd, "inconsistency": 0.05 + 0.02 * seed,
                            "gd_val_error": gd_err, "svm_val_error": v,
                            "expected_if_uncorrelated": 2 * gd_err * (1 - gd_err)})
    return (pd.DataFrame(err).reindex(columns=["point"] + ERROR_COLUMNS),
            pd.DataFrame(inc).reindex(columns=["point"] + INCONSISTENCY_COLUMNS))


def _row(s, **cfg):
    sel = np.ones(len(s), bool)
    for k, v in cfg.items():
        sel &= (s[k] == v).to_numpy()
    assert sel.sum() == 1, cfg
    return s[sel].iloc[0]


def test_summarize_means_and_stds():
    s = summarize(*sweep_tables())
    # 3 predictors x 2 H x 2 N x 2 momenta configurations, 2 seeds each
    assert len(s) == 24 and (s["n_seeds"] == 2).all()
    gd = _row(s, predictor="gd-gln", hidden_units=20, train_size=1000, momentum=0.9)
    mean = 0.10 + 0.015 + 0.002 - 0.02 + 0.005
    assert gd["val_error_mean"] == pytest.approx(mean)
    assert gd["val_error_std"] == pytest.approx(0.01 / math.sqrt(2))
    assert gd["n_failed"] == 0 and math.isnan(gd["inconsistency_mean"]) and math.isnan(gd["expected_if_uncorrelated_mean"])
    svm = _row(s, predictor="svm-gln", hidden_units=10, train_size=500, momentum=0.0)
    assert svm["val_error_mean"] == pytest.approx(0.12 + 0.015 + 0.001)
    assert svm["train_error_mean"] == pytest.approx(0.015)
    assert svm["train_error_std"] == pytest.approx(0.01 / math.sqrt(2))
    assert svm["inconsistency_mean"] == pytest.approx(0.08)
    assert svm["inconsistency_std"] == pytest.approx(0.02 / math.sqrt(2))
    p1, p2 = 0.10 + 0.01 + 0.001, 0.10 + 0.02 + 0.001
    assert svm["expected_if_uncorrelated_mean"] == pytest.approx((2 * p1 * (1 - p1) + 2 * p2 * (1 - p2)) / 2)
    # the failed svm-l2 seed: counted, excluded from the statistics (one seed left: std NaN)
    bad = _row(s, predictor="svm-l2", hidden_units=10, train_size=500, momentum=0.0)
    assert bad["n_seeds"] == 2 and bad["n_failed"] == 1
    assert bad["val_error_mean"] == pytest.approx(0.15 + 0.01 + 0.001)
    assert math.isnan(bad["val_error_std"]) and bad["inconsistency_mean"] == pytest.approx(0.07)
    # an inaccurate solve is usable, not failed
    inacc = _row(s, predictor="svm-gln", hidden_units=20, train_size=1000, momentum=0.9)
    assert inacc["n_failed"] == 0 and inacc["val_error_mean"] == pytest.approx(0.12 + 0.015 + 0.002 - 0.02)
    assert s["n_failed"].sum() == 1


def test_summarize_is_deterministic_and_works_without_point_column():
    errors, incons = sweep_tables()
    a = summarize(errors, incons)
    b = summarize(errors.sample(frac=1, random_state=0).drop(columns="point"),
                  incons.sample(frac=1, random_state=1).drop(columns="point"))
    pd.testing.assert_frame_equal(a, b)
    assert list(a["predictor"].iloc[[0, -1]]) == ["gd-gln", "svm-l2"]


def _check_png(path):
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 200
    assert float(np.var(img[..., :3])) > 0


@pytest.mark.slow
def test_plot_sweep_writes_five_nonblank_pngs(tmp_path):
    errors, incons = sweep_tables()
    paths = plot_sweep(errors, incons, tmp_path, title="test sweep")
    assert sorted(p.name for p in paths) == sorted(f"{n}.png" for n in [*NAMES.values(), "panels"])
    for p in paths:
        assert p.parent == tmp_path / "figures"
        _check_png(p)
    assert not list((tmp_path / "figures").glob(".*tmp"))  # no temp files left behind


def test_figure_contents():
    errors, incons = sweep_tables()
    figs = make_figures(errors, incons)
    d = figs[NAMES["d"]].axes
    assert len(d) == 2 and all(ax.get_xscale() == "log" for ax in d)  # one subplot per N
    assert d[0].get_xlabel() == "hidden units H (log2 scale)"
    labels = {t.get_text() for t in d[0].get_legend().get_texts()}
    assert labels == {"gd-gln (momentum 0)", "gd-gln (momentum 0.9)", "svm-gln", "svm-l2"}
    # (a): failed solve left out: 32 pairs - 1
    a = figs[NAMES["a"]].axes[0]
    assert sum(len(line.get_xdata()) for line in _dots(a)) == 31
    # (c): one bar per legend label; the best GD (momentum 0) is H=10, N=1000
    c = figs[NAMES["c"]].axes[0]
    assert [t.get_text() for t in c.get_yticklabels()] == ["gd-gln (momentum 0)", "gd-gln (momentum 0.9)",
                                                           "svm-gln", "svm-l2"]
    assert "H=10, C=2, N=1000, median_init=True" in {t.get_text() for t in c.texts}


@pytest.mark.slow
def test_shallow_model_uses_hyperplanes_on_panel_d(tmp_path):
    errors, incons = sweep_tables(model="shallow", units=(0, 1, 3), gd="gd-shallow", svms=("svm-shallow",))
    figs = make_figures(errors, incons)
    for ax in figs[NAMES["d"]].axes + [figs["panels"].axes[3]]:
        assert ax.get_xlabel() == "hyperplanes k = log2(C)" and ax.get_xscale() == "linear"
        xs = sorted({x for line in ax.get_lines() for x in line.get_xdata()})
        assert xs == [0, 1, 3]
    assert any("k=" in t.get_text() for t in figs[NAMES["c"]].axes[0].texts)
    for p in plot_sweep(errors, incons, tmp_path):
        _check_png(p)


def test_no_usable_results_is_a_note_not_a_crash(tmp_path):
    errors, incons = sweep_tables()
    errors["status"] = np.where(errors["predictor"].str.startswith("gd-"), "nan", "failed")
    figs = make_figures(errors, incons)
    for key in ("a", "b", "c", "d"):
        texts = [t.get_text() for ax in figs[NAMES[key]].axes for t in ax.texts]
        assert any("no usable results" in t for t in texts), key
    for p in plot_sweep(errors, incons, tmp_path):
        _check_png(p)


@pytest.mark.slow
def test_gb_plot_redraws_the_panels_from_a_directorys_tables(tmp_path):

    from gbcli.fs.safe import write_csv

    errors, incons = sweep_tables()
    write_csv(tmp_path / "tables" / "errors.csv", errors)
    write_csv(tmp_path / "tables" / "inconsistency.csv", incons)
    import forked_gb   # a real process forked from one that has imported gb

    done = forked_gb.run(["plot", tmp_path], tmp_path)
    # drawn, and, as `gb compare` does, exit code 1 for the rows that are not results
    assert done.returncode == 1 and "svm-l2 (failed)" in done.stderr and "Traceback" not in done.stderr, done.stderr
    for name in [*NAMES.values(), "panels"]:
        img = mpimg.imread(tmp_path / "figures" / f"{name}.png")
        assert img.shape[0] > 100 and img[..., :3].std() > 0.01   # drawn, not blank
    missing = forked_gb.run(["plot", tmp_path / "nothing"], tmp_path)
    assert missing.returncode == 2 and "errors.csv: not found" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_overview_splits_by_momentum_and_averages_every_point():
    from gbcli.reports.tables import overview

    errors, incons = sweep_tables()
    view = overview(errors, incons)
    assert len(view) == 3 * 2                                       # 3 predictors x 2 momenta
    row = view[(view.predictor == "gd-gln") & (view.momentum == 0.9)].iloc[0]
    expect = errors[(errors.predictor == "gd-gln") & (errors.momentum == 0.9)].val_error.mean()
    assert row.points == 8 and row.infeasible == 0 and row.val_error == pytest.approx(expect)
    svm = view[(view.predictor == "svm-gln") & (view.momentum == 0.0)].iloc[0]
    assert svm.inconsistency == pytest.approx(incons[(incons.predictor_a == "svm-gln")
                                                     & (incons.momentum == 0.0)].inconsistency.mean())
    single = overview(errors[errors.momentum == 0.0], incons[incons.momentum == 0.0])
    assert "momentum" not in single.columns and len(single) == 3


def test_curves_show_the_normalized_margin_and_the_parameter_norm(tmp_path):
    """Issue 35: the curves of implicit-bias work are drawn (metrics.csv has them), the norm on a log
    axis once it spans decades, and a run's title carries its inconsistency once compared."""
    from gbcli.runs.figures import curves_figure
    from gbcli.runs.index import headline

    steps = np.arange(0, 1000, 10)
    m = pd.DataFrame({"step": steps, "train_loss": 1 / (1 + steps), "train_error": 0.0, "val_error": 0.1,
                      "normalized_margin": np.tanh(steps / 300) - 0.2, "weight_norm": 1 + steps ** 1.5})
    fig = curves_figure({"run": m})
    axes = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    assert "normalized margin (smallest over training points)" in axes and "parameter norm" in axes
    assert axes["parameter norm"].get_yscale() == "log" and axes["normalized margin (smallest over training points)"].get_yscale() == "linear"
    line = axes["normalized margin (smallest over training points)"].get_lines()[0]
    assert np.allclose(line.get_ydata(), m["normalized_margin"])
    small = curves_figure({"run": m.assign(weight_norm=4 + steps / 1000)})
    assert {ax.get_title(): ax for ax in small.axes}["parameter norm"].get_yscale() == "linear"
    (tmp_path / "tables").mkdir()
    pd.DataFrame({"predictor_a": ["svm-gln", "svm-l2"], "predictor_b": ["gd-gln", "gd-gln"],
                  "inconsistency": [0.044, 0.073], "expected_if_uncorrelated": [0.115, 0.115]}).to_csv(
        tmp_path / "tables" / "inconsistency.csv", index=False)
    assert headline(tmp_path) == "inconsistency with GD: svm-gln 0.044, svm-l2 0.073 (2p(1-p) 0.115)"
    assert headline(tmp_path / "nowhere") == ""


def test_the_margin_ratio_panel_shows_the_whole_curve():
    """Issue 35: the axis was fixed near [-0.45, 1.05]; a curve starting at -1.3 was mostly off it."""
    from gbcli.runs.figures import training_figure

    steps = np.arange(1, 500)
    m = pd.DataFrame({"step": steps, "val_error": 0.1, "margin_ratio": -1.3 + 2.2 * (1 - np.exp(-steps / 100))})
    fig = training_figure({"run": m})
    (ax,) = [a for a in fig.axes if a.get_lines() and np.allclose(a.get_lines()[0].get_ydata(), m["margin_ratio"])]
    lo, hi = ax.get_ylim()
    assert lo < -1.3 and hi >= 1.0


def test_sweep_panels_say_which_dot_is_which_point():
    """Issue 35: in panels (a) and (b) the marker says the program and the colour the grid key that
    varies (fig2: hidden units), each with a legend entry."""
    from pathlib import Path

    from gbcli.reports.tables import read_tables

    errors, incons = read_tables(Path(__file__).resolve().parents[1] / "results" / "paper" / "fig2")
    figs = make_figures(errors, incons)
    for stem in (NAMES["a"], NAMES["b"]):
        (ax,) = figs[stem].axes
        texts = {t.get_text() for legend in ax.findobj(lambda a: type(a).__name__ == "Legend") for t in legend.get_texts()}
        assert {f"hidden_units={h}" for h in sorted(errors["hidden_units"].unique())} <= texts, texts
        assert {"svm-gln", "svm-l2"} <= texts, texts
        colours = {tuple(np.round(matplotlib.colors.to_rgba(line.get_color()), 3)) for line in _dots(ax)}
        assert len(colours) >= errors["hidden_units"].nunique()


def _dots(ax) -> list:
    """The lines of a panel that are dots (no line style): one per program, momentum and key value."""
    return [line for line in ax.get_lines() if line.get_linestyle() in ("None", "", " ")]


def _legends(fig) -> list:
    return fig.findobj(lambda a: type(a).__name__ == "Legend")


def test_momentum_has_its_own_fill_in_panels_a_and_b_and_one_legend_beside_the_dots():
    """Issue 49: panels (a) and (b) tell momentum 0 from 0.9 (full and hollow markers, each in the
    legend), with one legend per panel, outside the axes (never over the dots)."""
    errors, incons = sweep_tables()
    figs = make_figures(errors, incons)
    for stem in (NAMES["a"], NAMES["b"]):
        fig = figs[stem]
        (ax,) = fig.axes
        fills = {line.get_fillstyle() for line in _dots(ax)}
        assert fills == {"full", "none"}, fills
        (legend,) = _legends(fig)
        texts = [t.get_text() for t in legend.get_texts()]
        assert "momentum 0 (filled markers)" in texts and "momentum 0.9 (hollow markers)" in texts, texts
        handles = dict(zip(texts, legend.legend_handles))
        assert handles["momentum 0 (filled markers)"].get_fillstyle() == "full"
        assert handles["momentum 0.9 (hollow markers)"].get_fillstyle() == "none"
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig).draw()
        box, axes_box = legend.get_window_extent(), ax.get_window_extent()
        assert box.x0 >= axes_box.x1 - 1, (box, axes_box)   # right of the axes: over no dot
    for stem in (NAMES["a"], NAMES["b"]):   # one momentum: one fill, no momentum entry
        fig = make_figures(errors[errors["momentum"] == 0.0], incons[incons["momentum"] == 0.0])[stem]
        assert {line.get_fillstyle() for line in _dots(fig.axes[0])} == {"full"}
        assert not [t for t in _legends(fig)[0].get_texts() if t.get_text().startswith("momentum")]


def test_a_single_run_has_no_one_point_log_axis_and_sweep_panels_name_the_sweep(tmp_path):
    """Issue 49: panel (d) of one H is a linear axis with its one tick; the panels of a sweep carry
    a title naming it (plot_sweep's default), those of a run the run's name."""
    errors, incons = sweep_tables()
    one = errors[errors["hidden_units"] == errors["hidden_units"].iloc[0]]
    figs = make_figures(one, incons[incons["hidden_units"] == errors["hidden_units"].iloc[0]])
    for ax in figs[NAMES["d"]].axes + [figs["panels"].axes[3]]:
        assert ax.get_xscale() == "linear", ax.get_title()
        assert [t.get_text() for t in ax.get_xticklabels()] == [f"{errors['hidden_units'].iloc[0]:g}"]
    assert all(ax.get_xscale() == "log" for ax in make_figures(errors, incons)[NAMES["d"]].axes)
    from gbcli.runs.figures import figure_title

    assert figure_title(errors, tmp_path / "grid-x") == f"sweep grid-x ({errors['point'].nunique()} points)"
    assert figure_title(errors.drop(columns=["point"]), tmp_path / "one-run") == "run one-run"
    for fig in make_figures(errors, incons, figure_title(errors, tmp_path / "grid-x")).values():
        assert fig.get_suptitle() == f"sweep grid-x ({errors['point'].nunique()} points)"


def _visible_tick_labels(fig, axis):
    """The tick labels a reader sees on `axis` (drawn with Agg): text and extent in pixels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    lo, hi = sorted(axis.get_view_interval())
    ticks = [t for t in axis.get_major_ticks() + axis.get_minor_ticks()
             if t.label1.get_visible() and t.label1.get_text() and lo <= t.get_loc() <= hi]
    return [(t.label1.get_text(), t.label1.get_window_extent(renderer)) for t in ticks]


def test_the_kkt_panels_draw_the_whole_logged_history_with_readable_ticks():
    """Issue: training.png's KKT panels showed only the last logged steps (their columns are NaN
    until the data are separated; a lone value between NaNs was not drawn at all), with '6x10^-1'
    tick labels running into each other. Every row that has the column is drawn, on the x range of
    the whole history, log where the values span decades, and the tick labels do not overlap."""
    from gbcli.runs.figures import training_figure

    steps = np.unique(np.geomspace(1, 20_000, 30).round()).astype(int)
    n = len(steps)
    residual = np.full(n, np.nan)
    residual[8] = 0.9                                       # separated once, then not again for a while
    residual[12:] = 0.8 * (steps[12:] / steps[12]) ** -0.6  # then for good, decaying over decades
    narrow = np.where(np.isnan(residual), np.nan, 0.62 - 0.2 * np.linspace(0, 1, n))  # within a decade
    m = pd.DataFrame({"step": np.r_[0, steps], "val_error": 0.1, "margin_ratio": np.r_[-1, np.linspace(-1, 0.9, n)],
                      "kkt_residual": np.r_[np.nan, residual], "kkt_complementarity_rel": np.r_[np.nan, narrow]})
    fig = training_figure({"run": m})
    axes = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    logged = m[m["step"] > 0]
    for title, col in (("KKT residual (relative)", "kkt_residual"), ("KKT complementarity (relative)",
                                                                       "kkt_complementarity_rel")):
        ax = axes[title]
        (line,) = ax.get_lines()
        has = logged[logged[col].notna()]
        assert list(line.get_xdata()) == list(has["step"]), title   # every row with the column, the lone one too
        assert np.allclose(line.get_ydata(), has[col])
        lo, hi = ax.get_xlim()
        assert lo <= logged["step"].iloc[0] and hi >= logged["step"].iloc[-1]   # the whole history's steps
        for axis in (ax.xaxis, ax.yaxis):
            labels = _visible_tick_labels(fig, axis)
            assert 2 <= len(labels) <= 10, (title, [t for t, _ in labels])
            assert not any(a.overlaps(b) for (_, a), (_, b) in itertools.combinations(labels, 2)), \
                (title, [t for t, _ in labels])
            assert all("\\times" not in t for t, _ in labels), labels   # no '6x10^-1' minor labels
    assert axes["KKT residual (relative)"].get_yscale() == "log"          # 0.9 .. 0.02: decades
    assert axes["KKT complementarity (relative)"].get_yscale() == "linear"   # 0.62 .. 0.42: less than one


def test_many_long_named_runs_share_one_legend_under_the_panels_and_each_line_is_told_apart():
    """16 runs named by long config values (results/theory/kkt-not-optimal): one figure legend below
    the panels, overlapping none of them, long values shortened, no two runs drawn alike."""
    from gbcli.runs.figures import short_value, training_figure

    steps = np.unique(np.geomspace(1, 4000, 40).astype(int))
    runs = {f"step_rule=constant, x={short_value([[4.0, 0.7071067811865476 + i, -4.0, 0.70710678]])}, depth={i}":
            pd.DataFrame({"step": steps, "val_error": 0.1, "kkt_residual": np.geomspace(1, 1e-12, len(steps)) * (i + 1)})
            for i in range(16)}
    assert all("0.70710678" not in name for name in runs)   # 4 significant digits
    fig = training_figure(runs, title="many")
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()   # laid out as savefig lays it out
    box = fig.legends[0].get_window_extent()
    for ax in fig.axes:
        if ax.get_visible() and ax.axison:
            assert not box.overlaps(ax.get_tightbbox()), "the legend covers a panel"
    lines = [line for ax in fig.axes for line in ax.get_lines()]
    assert len({(line.get_color(), line.get_linestyle()) for line in lines}) == len(runs)


@pytest.mark.parametrize("shift", [0.0, -0.08, +0.3])
def test_panel_a_fits_gds_errors_and_always_shows_y_equals_x(shift):
    """The x axis fits GD's errors; y = x crosses the panel even when every SVM lies far from it
    (a 4-point sweep whose svm-gln errors were all 0.08 below GD's drew an empty legend entry)."""
    errors, incons = sweep_tables()
    incons = incons.assign(svm_val_error=incons["svm_val_error"] + shift)
    ax = make_figures(errors, incons)[NAMES["a"]].axes[0]
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    gd = incons["gd_val_error"]
    assert x0 <= gd.min() and x1 >= gd.max()
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "y = x"]
    assert max(x0, y0) < min(x1, y1), "y = x does not cross the panel"
    if shift == 0.0:   # GD and SVM errors overlap: no need to widen x beyond GD's span and its margins
        assert x1 - x0 < 3 * (gd.max() - gd.min()) + 0.05


def _fake_sweep(root, grid):
    """A sweep folder as gb leaves it: each point's gd/metrics.csv and gd/config.yaml, and
    tables/points.csv listing the points in the grid's order (ids deliberately not in that order)."""
    import yaml

    rows = []
    for k, (pid, mom, seed) in enumerate(grid):
        gd = root / "points" / pid / "gd"
        gd.mkdir(parents=True)
        steps = np.arange(0, 50, 10)
        pd.DataFrame({"step": steps, "epoch": steps / 10, "lr": 0.1, "train_loss": 1 / (1 + steps + k),
                      "train_error": 0.1, "val_error": 0.2, "weight_norm": 1 + steps,
                      "normalized_margin": 0.01}).to_csv(gd / "metrics.csv", index=False)
        (gd / "config.yaml").write_text(yaml.safe_dump({"name": "s", "training": {"momentum": mom},
                                                        "contexts": {"seed": seed}}))
        rows.append({"point": pid, "name": f"momentum={mom},seed={seed}", "training.momentum": mom,
                     "contexts.seed": seed})
    (root / "tables").mkdir()
    pd.DataFrame(rows).to_csv(root / "tables" / "points.csv", index=False)


def test_a_sweeps_curves_have_one_legend_in_the_grids_order_and_a_line_style_per_momentum(tmp_path):
    """Issue 49: curves.png of a sweep has one legend (not one per panel), right of the panels, its
    entries in the grid's order (points.csv), momentum told by the line style, and a title naming
    the sweep."""
    from gbcli.runs.figures import sweep_curves

    grid = [("ff01", 0.0, 1), ("aa02", 0.0, 2), ("cc03", 0.9, 1), ("bb04", 0.9, 2)]
    _fake_sweep(tmp_path / "my-grid", grid)
    fig, runs, label = sweep_curves(tmp_path / "my-grid")
    legends = _legends(fig)
    assert len(legends) == 1 and legends[0] in fig.legends   # the figure's, none in a panel
    texts = [t.get_text() for t in legends[0].get_texts()]
    assert texts == [label[p] for p, _, _ in grid] == ["momentum=0.0, seed=1", "momentum=0.0, seed=2",
                                                      "momentum=0.9, seed=1", "momentum=0.9, seed=2"]
    styles = {t: h.get_linestyle() for t, h in zip(texts, legends[0].legend_handles)}
    assert styles[texts[0]] == styles[texts[1]] != styles[texts[2]] == styles[texts[3]]
    for ax in fig.axes:   # every panel draws a momentum-0.9 point dashed
        drawn = {line.get_label(): line.get_linestyle() for line in ax.get_lines()}
        if drawn:
            assert drawn[texts[2]] == "--" and drawn[texts[0]] == "-"
    assert fig.get_suptitle().startswith("sweep my-grid: ")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    right = max(ax.get_window_extent().x1 for ax in fig.axes if ax.get_lines())
    assert legends[0].get_window_extent().x0 >= right - 1   # beside the curves, never over them


def test_a_point_folder_an_earlier_grid_left_is_not_drawn(tmp_path):
    """A sweep directory rerun with a changed grid keeps the old grid's point folders (no result is
    removed unasked); the curves show the points tables/points.csv lists, not those folders."""
    import shutil

    from gbcli.runs.figures import sweep_curves

    grid = [("ff01", 0.0, 1), ("aa02", 0.9, 1)]
    _fake_sweep(tmp_path / "s", grid)
    shutil.copytree(tmp_path / "s" / "points" / "ff01", tmp_path / "s" / "points" / "old9")
    _, runs, label = sweep_curves(tmp_path / "s")
    assert sorted(runs) == ["aa02", "ff01"] and sorted(label) == ["aa02", "ff01"]
    (tmp_path / "s" / "tables" / "points.csv").unlink()   # not aggregated yet: every folder
    assert sorted(sweep_curves(tmp_path / "s")[1]) == ["aa02", "ff01", "old9"]


def test_a_quantity_defined_only_late_says_so_in_its_panel():
    """Issue 49: a KKT panel whose column is NaN until late says from which step it has values and
    why; a column with values from the first step has no such note."""
    from gbcli.runs.figures import late_note, training_figure

    steps = np.unique(np.geomspace(1, 10_000, 40).astype(int))
    kkt = np.where(steps >= 5000, 1e-3, np.nan)
    m = pd.DataFrame({"step": steps, "val_error": 0.1, "kkt_residual": kkt, "kkt_complementarity_rel": kkt,
                      "margin_ratio": 0.5, "margin_gap": 0.1})
    assert late_note({"r": m}, "margin_ratio") == ""
    note = late_note({"r": m}, "kkt_residual")
    assert note.startswith(f"values from step {steps[steps >= 5000][0]:,} only ({(steps >= 5000).sum()} logged)")
    assert "separates the training data" in note
    fig = training_figure({"r": m})
    panel = {ax.get_title(): [t.get_text() for t in ax.texts] for ax in fig.axes}
    assert any("values from step" in t for t in panel["KKT residual (relative)"])
    assert not panel["normalized margin / best (matching program)"]
