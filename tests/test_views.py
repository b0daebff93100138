"""Views that say what differs, and names wherever a run can be named (issue 49, items 6, 10, 11):
a run's --name and a sweep point's readable name resolve in `gb runs show|diff`, `gb compare`,
`gb plot`, `gb verify` and `gbcli.load_run` (one resolver, gbcli.runs.index.resolve); `gb compare`
and `gb runs` on a sweep show every grid axis that varies; `repr(load_run(...))` is a few lines;
`gb runs show` keeps its headers whole at 160 columns; a reader that closes the pipe early is no
error; a metrics.csv no figure can draw is refused in one line. The CLI cases run the real `gb` on
tiny digits runs."""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

import forked_gb

BASE = {"name": "views", "dataset": {"name": "digits", "train_size": 100, "val_size": 200},
        "model": {"kind": "gln", "hidden_units": 2}, "training": {"epochs": 3}, "svm": {"objectives": ["svm-gln"]}}
GRID = {"training.momentum": [0.0, 0.9], "contexts.seed": [1, 2]}


def gb(args, cwd: Path, columns: int = 200) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": str(columns)}
    return forked_gb.run(args, cwd, env, timeout=600)


def ok(p: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert p.returncode == 0 and "Traceback" not in p.stderr, f"exit {p.returncode}\n{p.stderr}\n{p.stdout}"
    return p


def refused(p: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2, one line on stderr naming every word, no traceback."""
    line = p.stderr.strip()
    assert p.returncode == 2 and "\n" not in line and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    assert all(w in line for w in words), (words, line)
    return line


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A run named `baseline` (trained, solved, compared) and a 2 x 2 sweep over momentum and seed."""
    w = tmp_path_factory.mktemp("views")
    (w / "cfg.yaml").write_text(yaml.safe_dump(BASE))
    (w / "sweep.yaml").write_text(yaml.safe_dump({**BASE, "name": "grid", "grid": GRID}, sort_keys=False))
    ok(gb(["train-gd", "cfg.yaml", "-q", "--name", "baseline"], w))
    ok(gb(["fit-svm", "cfg.yaml", "-q"], w))
    ok(gb(["compare", "runs/views"], w))
    ok(gb(["sweep", "sweep.yaml", "-q"], w))
    return w


def _points(work: Path) -> pd.DataFrame:
    return pd.read_csv(work / "runs" / "grid" / "tables" / "points.csv")


# ------------------------------------------------------------------ item 6: names


@pytest.mark.slow
def test_a_run_is_named_by_its_name_and_a_point_by_its_readable_name_in_every_command(work):
    points = _points(work)
    moving = points[points["training.momentum"] == 0.9].iloc[-1]
    name, pid = moving["name"], moving["point"]
    shown = ok(gb(["runs", "show", "baseline"], work)).stdout
    assert shown.startswith("runs/views: run, complete") and "name: baseline" in shown
    for given in (f"grid/{name}", f"runs/grid/{name}", name, f"grid/{pid}"):
        first, second = ok(gb(["runs", "show", given], work)).stdout.splitlines()[:2]
        assert first.startswith(f"runs/grid/points/{pid}: run"), (given, first)
        assert second == f"point {name} of sweep runs/grid", second
    diff = ok(gb(["runs", "diff", "baseline", f"grid/{name}", "--format", "csv"], work)).stdout
    keys = {r["key"] for r in csv.DictReader(io.StringIO(diff))}
    assert "training.momentum" in keys and "model.hidden_units" not in keys
    assert "tables -> runs/views/tables" in ok(gb(["compare", "baseline"], work)).stdout
    assert "figure -> runs/views/figures/curves.png" in ok(gb(["plot", "baseline"], work)).stdout
    assert " verified" in ok(gb(["verify", "baseline"], work)).stdout
    refused(gb(["runs", "show", "no-such-name"], work), "RUN: no-such-name", "no such run directory", "named")
    refused(gb(["compare", "grid/momentum=7"], work), "RUN_DIR: grid/momentum=7", "no such run directory")


@pytest.mark.slow
def test_a_name_two_runs_share_is_refused_naming_both(work, tmp_path):
    for d in ("a", "b"):
        shutil.copytree(work / "runs" / "views", tmp_path / "runs" / d, symlinks=True)
    line = refused(gb(["runs", "show", "baseline"], tmp_path), "RUN: baseline names 2 runs", "runs/a", "runs/b")
    assert "give the path" in line


@pytest.mark.slow
def test_load_run_takes_runs_sweeps_and_names_and_its_repr_is_short(work, monkeypatch):
    import gbcli

    monkeypatch.chdir(work)
    run = gbcli.load_run("baseline")
    assert run.path == Path("runs/views") and run.name == "baseline" and run.model is not None
    sweep = gbcli.load_run("grid")
    assert sweep.kind == "sweep" and list(sweep.points["point"]) == list(_points(work)["point"])
    assert sweep.axes == {"training.momentum": [0.0, 0.9], "contexts.seed": [1, 2]}
    assert len(sweep.errors) == 8
    for _, row in _points(work).iterrows():   # each point by its readable name: its own config
        point = gbcli.load_run(f"grid/{row['name']}")
        assert point.path == Path("runs/grid/points") / row["point"]
        assert (point.config.training.momentum, point.config.contexts.seed) == (row["training.momentum"],
                                                                               row["contexts.seed"])
    for r in (run, sweep, point):
        text = repr(r)
        assert 2 <= len(text.splitlines()) <= 4 and len(text) < 400, text
        assert "DataFrame" not in text and "step" not in text   # no table dumped
    assert "4 points; axes: training.momentum: 0.0, 0.9; contexts.seed: 1, 2" in repr(sweep)   # the grid's order
    with pytest.raises(gbcli.GbError, match="no such run directory"):
        gbcli.load_run("nothing-named-so")


# ------------------------------------------------------------------ item 6: what differs


@pytest.mark.slow
def test_compare_and_runs_on_a_sweep_show_every_axis_that_varies(work):
    out = ok(gb(["compare", "grid"], work)).stdout
    header = next(l for l in out.splitlines() if "point" in l and "predictor" in l)
    cells = [c.strip() for c in re.split(r"[┃│|]", header) if c.strip()]
    assert cells[:3] == ["point", "momentum", "seed"], cells
    points = _points(work)
    for _, p in points.iterrows():   # each point's rows carry its own momentum and seed
        rows = [[c.strip() for c in re.split(r"[│|]", l) if c.strip()] for l in out.splitlines() if p["point"] in l]
        assert rows and all(r[1] == f"{p['training.momentum']:g}" and r[2] == str(p["contexts.seed"]) for r in rows)
    listing = ok(gb(["runs"], work, columns=250)).stdout
    assert "grid: momentum 0,0.9; seed 1,2" in " ".join(listing.split()).replace("│ ", "").replace(" │", "") \
        or ("grid:" in listing and "momentum 0,0.9;" in listing)
    row = next(r for r in csv.DictReader(io.StringIO(ok(gb(["runs", "--format", "csv"], work)).stdout))
               if r["run"] == "grid")
    assert row["grid"] == "training.momentum=0.0,0.9;contexts.seed=1,2"
    assert row["training.momentum"] == "[0.0, 0.9]"


def test_with_axes_adds_the_axes_and_hides_what_they_decide():
    """The view's rule: the grid axes by their short names, first; a configuration column that the
    axes decide (context_seed under contexts.seed) or that is one value for all rows is left out;
    one that varies on its own is kept."""
    from gbcli.reports.views import grid_line, short_names, with_axes

    points = [{"point": f"p{i}", "name": "", "training.momentum": m, "contexts.seed": s}
              for i, (m, s) in enumerate([(0.0, 1), (0.0, 2), (0.9, 1), (0.9, 2)])]
    # two predictors a point: the shallow one's init_seed differs within a point (the axes do not decide it)
    table = pd.DataFrame([{"point": p["point"], "predictor": pred, "hidden_units": 5, "momentum": p["training.momentum"],
                           "context_seed": p["contexts.seed"], "init_seed": 7 + (pred == "svm-shallow"),
                           "val_error": 0.1} for p in points for pred in ("gd-gln", "svm-shallow")])
    view, shown = with_axes(table, points, ["predictor", "hidden_units", "val_error"])
    assert shown == ["point", "momentum", "seed", "init_seed", "predictor", "val_error"], shown
    assert list(view["seed"]) == [1, 1, 2, 2, 1, 1, 2, 2] and list(view["momentum"])[::2] == [0.0, 0.0, 0.9, 0.9]
    decided, shown = with_axes(table[table["predictor"] == "gd-gln"], points, ["predictor", "val_error"])
    assert shown == ["point", "momentum", "seed", "predictor", "val_error"], shown   # init_seed: one per point
    single, cols = with_axes(table.drop(columns="point"), [], ["predictor", "hidden_units", "val_error"])
    assert cols == ["context_seed", "init_seed", "momentum", "predictor", "hidden_units", "val_error"]
    assert short_names(["contexts.seed", "dataset.seed", "training.momentum"]) == \
        {"contexts.seed": "contexts.seed", "dataset.seed": "dataset.seed", "training.momentum": "momentum"}
    assert grid_line({"training.momentum": [0.0, 0.9], "contexts.seed": [1, 2]}) == "grid: momentum 0,0.9; seed 1,2"


# ------------------------------------------------------------------ item 10: headers, pipes


@pytest.mark.slow
def test_runs_show_keeps_every_header_whole_at_160_columns(work):
    out = ok(gb(["runs", "show", "baseline"], work, columns=160)).stdout
    assert max(len(l) for l in out.splitlines() if l[:1] in "┏┃┡│└") <= 160   # the tables fit
    for word in ("expected_if_uncorrelated", "inconsistency", "solve_seconds", "normalized_margin", "svm-gln", "gd"):
        assert re.search(rf"(^|[\s│┃]){re.escape(word)}([\s│┃]|$)", out, re.M), word


def test_by_field_puts_stages_across_and_fields_down():
    from gbcli.reports.views import by_field

    rows = by_field({"svm-gln": {"status": "optimal", "objective": 2.0}, "gd": {"status": "ok", "steps": 10}})
    assert rows == [{"": "status", "svm-gln": "optimal", "gd": "ok"}, {"": "objective", "svm-gln": 2.0, "gd": None},
                    {"": "steps", "svm-gln": None, "gd": 10}]


@pytest.mark.slow
def test_a_reader_that_stops_early_is_no_error(work, tmp_path):
    """`gb runs --format csv | head -1`: exit 0 and nothing on stderr, as a Unix filter (a real
    process, its stdout a pipe the reader closes after one line)."""
    for i in range(80):
        shutil.copytree(work / "runs" / "views", tmp_path / "runs" / f"r{i:02d}", symlinks=True)
    gb_bin = Path(sys.executable).parent / "gb"
    for fmt in ("csv", "json", "table"):
        p = subprocess.Popen([str(gb_bin), "runs", "--format", fmt], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})
        first = p.stdout.readline()
        p.stdout.close()
        err = p.stderr.read()
        assert p.wait(timeout=120) == 0 and first and err == b"", (fmt, p.returncode, err)


# ------------------------------------------------------------------ item 11: a metrics.csv no axis can hold


@pytest.mark.slow
@pytest.mark.parametrize("column, value, row", [("train_loss", "1e308", 2), ("val_error", "-1e300", 1),
                                                 ("step", "1e300", -1)])
def test_plot_refuses_a_value_no_axis_can_hold_in_one_line(work, tmp_path, column, value, row):
    run = tmp_path / "r"
    shutil.copytree(work / "runs" / "views", run, symlinks=True)
    shutil.rmtree(run / "figures", ignore_errors=True)
    metrics = run / "gd" / "metrics.csv"
    m = pd.read_csv(metrics, dtype=str)
    m.loc[m.index[row], column] = value
    m.to_csv(metrics, index=False)
    line = refused(gb(["plot", "r"], tmp_path), "r/gd/metrics.csv", f"{column} = {float(value):g}",
                   f"row {len(m) if row == -1 else row + 1}")
    assert "beyond" in line
    assert not (run / "figures").exists() or not any((run / "figures").iterdir())   # nothing written


def test_the_plottable_bound_sits_between_float32_and_float64_ends(tmp_path):
    """A value just inside the bound is drawn; just outside, refused: the rule at both sides."""
    import numpy as np

    from gbcli.errors import GbError
    from gbcli.runs.figures import MAX_STEP, PLOTTABLE, read_metrics
    from gbcli.store.records import METRICS_COLUMNS

    assert 3.5e38 < PLOTTABLE < 1e300
    base = pd.DataFrame({c: [0.0, 1.0, 2.0] for c in METRICS_COLUMNS})
    for col, inside, outside in (("train_loss", PLOTTABLE, PLOTTABLE * 1.01), ("weight_norm", -PLOTTABLE, -PLOTTABLE * 1.01),
                                 ("step", MAX_STEP, MAX_STEP * 2)):
        for v, good in ((inside, True), (outside, False), (np.inf, col != "step")):
            f = base.copy()
            f.loc[2, col] = v
            path = tmp_path / f"{col}-{good}.csv"
            f.to_csv(path, index=False)
            if good:
                assert len(read_metrics(path)) == 3
            else:
                with pytest.raises(GbError, match=rf"{col}"):
                    read_metrics(path)


# ------------------------------------------------------------------ item 10: the docs say what the code does

ROOT = Path(__file__).resolve().parents[1]


def test_run_directories_doc_names_the_instruments_whose_runs_keep_checkpoints():
    """docs/run-directories.md: a tracked run keeps checkpoints exactly when its instruments are
    resumable (gbcli.instruments: `resumable`), and says so once (no blanket "write none")."""
    from gbcli.registry import INSTRUMENTS

    text = " ".join((ROOT / "docs" / "run-directories.md").read_text().split())
    section = text[text.index("## Checkpoints and resume"):]
    section = section[:section.index("Long working-set solves")]
    listed = re.search(r"solved at the start \(([^)]*)\)", section).group(1)
    assert {n.strip() for n in listed.split(",")} == {k for k, ins in INSTRUMENTS.items() if ins.resumable}
    assert "`training.track`) write none" not in section and section.count("training.track") == 1


def test_readme_sample_of_gb_runs_has_the_columns_gb_runs_prints(tmp_path):
    """The README's sample `gb runs` output has every column `gb runs` prints, in its order."""
    from gbcli.runs.index import RunInfo

    text = (ROOT / "README.md").read_text()
    start = text.index("What `gb runs` shows after the tour")
    block = text[text.index("```text", start) + len("```text"):text.index("```", text.index("```text", start) + 7)]
    header = block[:block.index("┡")].splitlines()   # the header's lines: a cell may wrap over two
    cells = [[c.strip() for c in l.strip().strip("┃").split("┃")] for l in header if l.startswith("┃")]
    shown = [" ".join(w for w in words if w) for words in zip(*cells)]
    columns = list(RunInfo(tmp_path, "run", "complete", {}, {}, {}, "").brief(tmp_path))
    assert shown == columns, (shown, columns)
    assert "(baseline)" in block and "complete" in block


# ------------------------------------------------------------------ item 7: tables without pandas


def _random_rows(rng) -> tuple[list[dict], list[str]]:
    """Rows as `gb compare` builds them, and worse: ints, floats (numpy's too), NaN, None, a key a
    row lacks, flags, text that needs quoting, empty text; columns the rows do not hold."""
    import numpy as np

    pool = [lambda: int(rng.integers(-5, 50_000)), lambda: float(rng.normal() * 10.0 ** rng.integers(-8, 20)),
            lambda: np.float64(rng.random()), lambda: np.float32(rng.random()), lambda: np.int64(rng.integers(9)),
            lambda: float("nan"), lambda: None, lambda: bool(rng.integers(2)), lambda: "",
            lambda: rng.choice(["svm-gln", "a,b", 'say "hi"', "two\nlines", "optimal"])]
    columns = [f"c{i}" for i in range(int(rng.integers(1, 6)))]
    kinds = {c: rng.choice(len(pool), size=int(rng.integers(1, 3))) for c in columns}
    rows = [{c: pool[int(rng.choice(kinds[c]))]() for c in columns if rng.random() > 0.1}
            for _ in range(int(rng.integers(0, 6)))]
    return rows, columns + (["extra"] if rng.random() < 0.3 else [])


def test_rows_write_the_csv_pandas_writes_and_print_as_pandas_typed_them():
    """`gb compare` writes its tables without pandas (issue 49: half a CPU second to import): each
    file must be the bytes `DataFrame(rows).reindex(columns).to_csv(index=False)` gives, over many
    random tables; a whole-number column with a missing cell is a float column, as in pandas."""
    import numpy as np

    from gbcli.reports.tables import Rows, read_rows

    rng = np.random.default_rng(49)
    for _ in range(400):
        rows, columns = _random_rows(rng)
        expected = pd.DataFrame(rows).reindex(columns=columns).to_csv(index=False)
        assert Rows(rows, columns).to_csv() == expected, (rows, columns)
    table = Rows([{"n": 3200, "x": 0.1}, {"n": None, "x": 2}], ["n", "x"])
    assert table.kind("n") == "float" and table.cells("n") == ["3200.0", ""] and table.kind("x") == "float"
    assert Rows([{"n": 1}, {"n": 2}]).kind("n") == "int" and Rows([{"f": True}, {"f": 1}]).kind("f") == "object"


def test_read_rows_reads_the_numbers_pandas_reads(tmp_path):
    """The listings read a run's tables without pandas: each number of a table as pandas reads it."""
    import numpy as np

    from gbcli.reports.tables import Rows, mean_of, read_rows

    rng = np.random.default_rng(7)
    for i in range(100):
        rows, columns = _random_rows(rng)
        path = tmp_path / f"t{i}.csv"
        path.write_text(Rows(rows, columns).to_csv())
        try:
            theirs = pd.read_csv(path)
        except pd.errors.EmptyDataError:
            continue
        ours = read_rows(path)
        assert ours.columns == list(theirs.columns) and len(ours) == len(theirs)
        for c in ours.columns:
            numeric = pd.to_numeric(theirs[c], errors="coerce")
            mean = None if any(isinstance(v, bool) for v in ours[c]) else numeric.mean()   # a flag is no number here
            if mean is not None and pd.notna(mean) and np.isfinite(mean):
                assert mean_of(ours[c]) == pytest.approx(float(mean), rel=1e-12, abs=1e-300), (c, ours[c])
    (tmp_path / "ragged.csv").write_text("a,b\n1,2,3\n")
    with pytest.raises(ValueError):
        read_rows(tmp_path / "ragged.csv")
    assert mean_of(["x", None, float("nan"), True, 1, 2.0]) == 1.5
