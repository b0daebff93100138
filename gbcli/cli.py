"""The `gb` command line: a thin layer over the library API (`gbcli.runs`, `gbcli.reports`, `gbcli.data`).
Torch and the run stages load inside the commands, once the arguments are valid: `gb --help` answers at once."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from pathlib import Path
from typing import List, Literal, Optional

import click
import typer
from rich.console import Console

from gbcli.errors import GbError
from gbcli.programs.solvers import NAMES as SOLVER_NAMES   # their one list imports no solver: `gb --help` stays fast
from gbcli.fs import layout
from gbcli.fs.layout import RunDir
from gbcli.fs.safe import present
from gbcli.text import printable, quoted


app = typer.Typer(add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None)
data_app = typer.Typer(no_args_is_help=True, help="Fetch or verify dataset files.")
app.add_typer(data_app, name="data")
runs_app = typer.Typer(help="Find and read runs: list them (the default), show one, diff two, export them to MLflow.")
app.add_typer(runs_app, name="runs")
config_app = typer.Typer(no_args_is_help=True,
                         help="A config as it runs (`show`), or every config key with its type, default and meaning "
                              "(`keys`).")
app.add_typer(config_app, name="config")


class _StdoutConsole(Console):
    """stdout's console: a closed pipe is `main`'s to judge (rich's own handling exits 1 before `main` sees it)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True   # nothing more to write
        raise BrokenPipeError(32, "Broken pipe")


console = _StdoutConsole()
if not console.is_terminal:  # logs and pipes: wide enough that table headers are not cut
    console = _StdoutConsole(width=160)
err_console = Console(stderr=True)


def _stderr(line: str) -> None:
    err_console.print(line, highlight=False, markup=False, soft_wrap=True)


OutOpt = typer.Option(None, "--out", metavar="DIR", help="run directory (default: output.dir, else runs/<config name>)")
SetOpt = typer.Option([], "--set", metavar="KEY.PATH=VALUE",
                      help="override a config value, e.g. --set training.momentum=0.9 (repeatable; the value is YAML)")
QuietOpt = typer.Option(False, "--quiet", "-q", help="no progress bars")
ConfigArg = typer.Argument(..., metavar="CONFIG", help="the YAML config file (see README: Config)")
RunDirArg = typer.Argument(..., metavar="RUN_DIR", help="a run directory (or a sweep's --out directory), or its "
                                                        "name as `gb runs` prints it")


def _path(raw: str, key: str) -> Path:
    """A path as given: an empty one, or one the system cannot hold, is refused as bad input naming `key`."""
    if raw == "":
        raise GbError(f"{key}: an empty path")
    if len(os.fsencode(raw)) >= 4096 or any(len(os.fsencode(part)) > 255 for part in raw.split("/")):
        raise GbError(f"{key}: a path of {len(raw):,} characters is too long for this system")
    return Path(raw)


def _named(raw: str, key: str) -> Path:
    """A run as the user names it: a path, as `gb runs` prints it, a --name or a point's name (`index.resolve`)."""
    from gbcli.runs.index import resolve

    return resolve(_path(raw, key), key=key)


DataDirOpt = typer.Option(None, "--data-dir", metavar="DIR",
                          help="the data directory holding mnist/ and fashion-mnist/ (default: $GB_DATA_DIR, "
                               "else ~/.cache/gb/data)")
SolverName = Literal[SOLVER_NAMES]
MAX_ERROR_LINE = 480   # characters of an error message (values in it are shortened to ~200 where they are quoted)


def _failed(rows) -> list[str]:
    """Predictors whose status is not a result (`records.is_result`): diverged, nan, inaccurate, failed, uncertified."""
    from gbcli.programs.design import Status
    from gbcli.store.records import Verdict, is_result

    return [f"{r['predictor']} ({Verdict.UNCERTIFIED if r['status'] == Status.INFEASIBLE else r['status']})"
            for r in rows if not (is_result(r["status"], gd=True) or is_result(r["status"], bool(r.get("certified"))))]


def _version(value: bool) -> None:
    if value:
        from gbcli import __version__

        console.print(f"gb {__version__}", highlight=False)
        raise typer.Exit(0)


@app.callback()
def _main(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="print the version and exit")):
    """gb: train GD networks, solve their max-margin programs, compare them."""


def _echo(msg: str) -> None:
    """One line, never cut; plain text (a path holding `[/b]` is no markup), non-printable characters escaped."""
    console.print(printable(msg), highlight=False, soft_wrap=True, markup=False)


def _logging(quiet: bool = False) -> None:
    """Show the library's messages (progress, stage lines) on stdout; -q: warnings only."""
    import logging

    from gbcli.logs import LOGGER, console_handler

    logger = logging.getLogger(LOGGER)
    for h in list(logger.handlers):
        if getattr(h, "_gb_console", False):
            logger.removeHandler(h)
    handler = console_handler(quiet)
    handler._gb_console = True
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def _run_stage(command: str, config: Path, out: Optional[str], set_: List[str], overrides: List[str], quiet: bool,
               force: bool, threads: int, name: Optional[str], tag: List[str], note: Optional[str]):
    """(its result, the run directory) of `gb train-gd` / `gb fit-svm`: every refusal answered before torch
    loads, the library's messages shown, the threads set (as a sweep worker's: the same numbers)."""
    from gbcli.config import load_config, run_dir_for
    from gbcli.store.labels import check_labels, write_labels
    from gbcli.store.lock import check_run_target

    labels = check_labels(name, tag, note)
    cfg = load_config(config, [*set_, *overrides])
    run_dir = run_dir_for(cfg, out, set_)
    check_run_target(run_dir, command)
    _logging(quiet)
    from gbcli.runs.threads import limit_threads

    limit_threads(threads)
    from gbcli.runs import stages   # torch: only once the input is known to be valid

    stage = stages.train_gd if command == "train-gd" else stages.fit_svm
    result = stage(cfg, run_dir, progress=not quiet, force=force, labels=labels)
    write_labels(run_dir, labels)   # a stage already done from this config: still named as asked
    return result, run_dir


def _print_tables(errors, incons, points: list[dict] = ()) -> None:
    """The tables, with a column for every key that varies between a sweep's `points` (its grid axes)."""
    from gbcli.reports.tables import rich_table
    from gbcli.reports.views import with_axes

    errors, show = with_axes(errors, list(points), ["predictor", "hidden_units", "contexts", "train_size", "train_error",
                                                    "val_error", "status", "objective", "solve_seconds", "rel_gap",
                                                    "certified"])
    console.print(rich_table(errors, "errors", show))
    incons, cols = with_axes(incons, list(points), ["predictor_a", "predictor_b", "inconsistency",
                                                    "expected_if_uncorrelated", "gd_val_error", "svm_val_error",
                                                    "gd_status"])
    console.print(rich_table(incons, "inconsistency (validation)", cols))


ForceOpt = typer.Option(False, "--force",
                        help="replace finished results that this command would otherwise refuse to remove "
                             "(a network or programs of another config), or redo a stage already finished "
                             "with this config")
NameOpt = typer.Option(None, "--name", help="a readable name for the run (shown by `gb runs`, exported; not its id)")
TagOpt = typer.Option([], "--tag", metavar="KEY=VALUE", help="a tag for the run (repeatable; shown and exported)")
NoteOpt = typer.Option(None, "--note", help="a note on the run (shown by `gb runs show`, exported)")
ThreadsOpt = typer.Option(1, "--threads", min=1, max=1024, metavar="N",
                          help="torch and BLAS threads (default 1, as a sweep's workers: a sweep point's config "
                               "then gives its numbers bit for bit; another count sums in another order, which "
                               "changes the last bits and, over a long training, can change errors)")


@app.command("train-gd")
def train_gd_cmd(config: Path = ConfigArg, out: Optional[str] = OutOpt, set_: List[str] = SetOpt, quiet: bool = QuietOpt,
                 force: bool = ForceOpt, threads: int = ThreadsOpt, name: Optional[str] = NameOpt,
                 tag: List[str] = TagOpt, note: Optional[str] = NoteOpt):
    """Train the configured network by gradient descent."""
    from gbcli.store.records import is_result

    s, run_dir = _run_stage("train-gd", config, out, set_, [], quiet, force, threads, name, tag, note)
    if s.get("skipped"):   # tracked: its records went to MLflow, as the library's one line said (-q: said here)
        if not s.get("tracked"):
            _echo(f"{run_dir / 'gd'}: already trained from this config ({s.get('status')}); nothing to do "
                  f"(--force retrains)")
        elif quiet:
            _echo(s["tracked"])
        if not is_result(s.get("status"), gd=True):
            raise typer.Exit(1)
        return
    if quiet:   # otherwise the library's own summary line was shown (once)
        _echo(f"{s['predictor']}: train error {s['train_error']:.4f}, val error {s['val_error']:.4f}, "
              f"{s['steps']} steps in {s['seconds']:.1f} s -> {run_dir / 'gd'}")
    if not is_result(s["status"], gd=True):
        _stderr(f"gb: training {s['status']}: {s.get('message', '')} (status in {RunDir(run_dir).summary})")
        raise typer.Exit(1)


@app.command("fit-svm")
def fit_svm_cmd(config: Path = ConfigArg, out: Optional[str] = OutOpt, set_: List[str] = SetOpt,
                objective: List[str] = typer.Option([], "--objective", metavar="NAME",
                                                    help="a program to solve, e.g. svm-gln (repeatable; default: svm.objectives)"),
                solver: Optional[SolverName] = typer.Option(None, "--solver",
                                                     help="the solver (each declares the norms it solves; default: "
                                                          "svm.solver, else the fastest certified one)"),
                quiet: bool = QuietOpt, force: bool = ForceOpt, threads: int = ThreadsOpt, name: Optional[str] = NameOpt,
                tag: List[str] = TagOpt, note: Optional[str] = NoteOpt):
    """Solve the matching convex max-margin programs."""
    overrides = [f"svm.objectives=[{', '.join(objective)}]"] if objective else []
    overrides += [f"svm.solver={solver}"] if solver else []
    results, run_dir = _run_stage("fit-svm", config, out, set_, overrides, quiet, force, threads, name, tag, note)
    tracked = next((r["tracked"] for r in results if r.get("tracked")), None)   # said by the library (-q: here)
    for r in results:
        if r.get("skipped") and not tracked:
            _echo(f"{r.get('predictor')}: already solved from this config ({r.get('status')}); nothing to do "
                  f"(--force solves again)")
    if tracked and quiet:
        _echo(tracked)
    _echo(f"results -> {run_dir / 'svm'}")
    bad = _failed(results)
    if bad:
        _stderr(f"gb: warning: not a certified result: {', '.join(bad)} (see {run_dir / 'svm'}/*/result.json)")
        raise typer.Exit(1)


@app.command("compare")
def compare_cmd(run_dir: str = RunDirArg):
    """Write and print the error and inconsistency tables of a run directory (of a finished sweep:
    its aggregated tables). Exit code 1 when a row is not a result (diverged, uncertified, failed)."""
    run_dir = _named(run_dir, "RUN_DIR")
    from gbcli.reports.tables import read_tables
    from gbcli.store.lock import dir_kind

    kind = dir_kind(run_dir, key="RUN_DIR")   # before torch loads: a wrong path is answered at once
    from gbcli.runs.compare import write_run_tables

    if kind == "sweep":   # a sweep directory: its aggregated tables, read only
        from gbcli.runs.index import sweep_points

        errors, incons = read_tables(run_dir)
        _print_tables(errors, incons, sweep_points(run_dir))
        _echo(f"a sweep: its aggregated tables are in {run_dir / 'tables'} (rerun `gb sweep` to update them)")
    else:
        errors, incons = write_run_tables(run_dir)
        _print_tables(errors, incons)
        _echo(f"tables -> {run_dir / 'tables'}")
    _exit_unless_results(errors, run_dir if kind == "sweep" else None)   # a failed point has no row: listed too


@app.command("plot")
def plot_cmd(run_dir: str = RunDirArg,
             points: bool = typer.Option(False, "--points",
                                         help="a sweep: also each point's own curves (points/<id>/figures/curves.png)")):
    """Draw the training curves (loss, training and validation error, tracked instruments) from the
    metrics.csv of a run or of every sweep point into RUN_DIR/figures/curves.png, and the four panels
    of protocol section 8: a run's from its records (as `gb compare` computes them), a sweep's or a
    folder's from its tables (RUN_DIR/tables/{errors,inconsistency}.csv)."""
    run_dir = _named(run_dir, "RUN_DIR")
    from gbcli.reports.tables import read_tables
    from gbcli.store.lock import dir_kind
    from gbcli.fs.safe import check_tree, staged_writes

    check_tree(run_dir)   # it writes RUN_DIR/figures/: never through a symlink
    kind = dir_kind(run_dir, key="RUN_DIR")   # a marker that is not gb's, or a mixed directory: refused
    from gbcli.runs.compare import run_tables
    from gbcli.runs.figures import plot_curves   # matplotlib and torch: once the input is known to be good
    from gbcli.runs.sweep import draw_figures, sweep_lock
    from gbcli.store.lock import run_lock

    # the writes under the directory's lock (a folder of tables only has none), taken once the input is read
    lock = {"run": lambda: run_lock(run_dir, key="RUN_DIR"),
            "sweep": lambda: sweep_lock(run_dir)}.get(kind, contextlib.nullcontext)
    if kind == "run":   # computed from its records, as `gb compare` does: its tables/ may be stale
        tables = run_tables(run_dir)
    elif any(present(RunDir(run_dir).tables / f) for f in (layout.ERRORS, layout.INCONSISTENCY)):
        tables = read_tables(run_dir)   # a damaged table: refused before anything is drawn
    else:
        tables = None
    with staged_writes(landing=lock):   # every figure drawn before one lands: a damaged record writes none
        curves = plot_curves(run_dir, per_point=points)
        if tables is None and not curves:
            read_tables(run_dir)   # neither curves nor tables: says what is missing
        drawn = draw_figures(*tables, run_dir) if tables is not None else []
    for path in curves + drawn:
        _echo(f"figure -> {path}")
    if tables is not None:
        _exit_unless_results(tables[0], run_dir if kind == "sweep" else None)


def _exit_unless_results(errors, sweep_dir: Path | None) -> None:
    """Exit 1 with a warning naming them when rows are not results or a sweep's failures.csv lists a point."""
    from gbcli.reports.tables import read_failures

    bad = (read_failures(sweep_dir) if sweep_dir is not None else []) + _failed(errors.to_dict("records"))
    if bad:
        _stderr(f"gb: warning: rows that are not results: {', '.join(dict.fromkeys(bad))}")
        raise typer.Exit(1)


@app.command("sweep")
def sweep_cmd(config: Path = ConfigArg, out: Optional[str] = OutOpt, set_: List[str] = SetOpt, quiet: bool = QuietOpt,
              executor: Optional[Literal["local", "slurm"]] = typer.Option(None, "--executor",
                                                     help="where the points run (default: sweep.executor)"),
              jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="points at once (default: sweep.jobs)"),
              threads: Optional[int] = typer.Option(None, "--threads", min=1, max=1024,
                                                    help="local: torch threads per job (default: sweep.threads, 1)"),
              dry_run: bool = typer.Option(False, "--dry-run", help="list the points (id, name, done) and exit"),
              name: Optional[str] = NameOpt, tag: List[str] = TagOpt, note: Optional[str] = NoteOpt):
    """Run a grid of configurations (`grid:` / `zip:` axes), aggregate tables and figures.
    Slurm's options are the config's (`sweep.partition`, `sweep.time_min`, ..., `sweep.slurm`; on the
    command line `--set sweep.account=acme`). Exit code 1 when a point failed (see tables/failures.csv)."""
    from gbcli.config import load_config
    from gbcli.store.labels import check_labels

    labels = check_labels(name, tag, note)
    load_config(config, set_)   # the base config (axes unexpanded) is valid: answered before torch and the sweep load
    from gbcli.reports.tables import overview, rich_table
    from gbcli.runs.sweep import dry_run as list_points, run_sweep

    if dry_run:
        table = list_points(config, out, tuple(set_))
        console.print(rich_table(table, f"{len(table)} points ({int(table['done'].sum())} done)",
                                 ["point", "name", "done"]))
        return
    errors, incons, failures = run_sweep(config, out, tuple(set_), executor, jobs, progress=not quiet,
                                         echo=_echo, threads=threads, labels=labels)
    if len(errors):
        view = overview(errors, incons)
        console.print(rich_table(view, "sweep overview (mean over points)", list(view.columns)))
    if len(failures):
        for _, f in failures.iterrows():
            _echo(f"failed: point {f['point']} ({f['status']} at {f['stage']}): {f['message']} [log: {f['log']}]")
        raise typer.Exit(1)


FormatOpt = typer.Option("table", "--format", "-f", help="a rich table, or CSV or JSON for other programs")
Format = Literal["table", "csv", "json"]
PROVENANCE_SHOWN = ("gb_version", "commit", "dirty", "python", "torch", "numpy", "host", "torch_threads", "command",
                    "started", "ended", "wall_seconds", "cpu_seconds")   # by `gb runs show`


def _emit_rows(rows: list[dict], fmt: str, title: str) -> None:
    """Rows as a rich table, CSV or JSON on stdout."""
    if fmt == "json":   # standard JSON: a non-finite number as the string Python spells it ("inf", "nan")
        def safe(v):
            if isinstance(v, float) and not math.isfinite(v):
                return str(v)
            return {str(k): safe(x) for k, x in v.items()} if isinstance(v, dict) else \
                [safe(x) for x in v] if isinstance(v, (list, tuple)) else v

        print(json.dumps(safe(rows), indent=2, default=str, allow_nan=False))
        return
    columns = list(dict.fromkeys(k for r in rows for k in r))
    if fmt == "csv":
        import csv

        writer = csv.DictWriter(sys.stdout, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(printable(title)))   # names and values as plain, printable text
    for c in columns:
        table.add_column(Text(printable(c)), overflow="fold")
    for r in rows:
        table.add_row(*[Text(printable("" if r.get(c) is None or (isinstance(r.get(c), float) and r[c] != r[c]) else
                                       (f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c])))) for c in columns])
    console.print(table)


@app.command("verify")
def verify_cmd(run_dirs: List[str] = typer.Argument(..., metavar="DIR...",
                                                   help="run or sweep directories, results folders with solutions/, "
                                                        "or folders of those"),
               export: Optional[str] = typer.Option(None, "--export", metavar="DEST",
                                                     help="also write each verified program's compact solution into "
                                                          "DEST/solutions/<point>/ (e.g. results/paper/fig2)"),
               fmt: Format = FormatOpt,
               tol: float = typer.Option(1e-6, "--tol", help="the certificate's tolerance (relative gap, 1 - the "
                                         "smallest margin); never taken from a stored config"),
               threads: int = ThreadsOpt):
    """Check every stored result again from the data: a trained network's outputs from its weights,
    and without a solver each program's certificate (objective, training margins, dual bound or ray)
    and predictions, against what the records claim. Exit code 1 when one does not verify (a
    diverged network included), 2 for bad input."""
    from gbcli.runs.threads import limit_threads
    from gbcli.runs.verify import export_solutions, verify

    limit_threads(threads)   # summed as the solve summed them: an output within rounding of 0 keeps its sign

    if not (math.isfinite(tol) and 0 < tol < 1):
        raise GbError(f"--tol: {tol!r} is not a number in (0, 1)")
    _logging(quiet=fmt != "table")   # its progress (n of N programs) with a table, never into CSV or JSON
    run_dirs = [_named(d, "DIR") for d in run_dirs]
    export = _path(export, "--export") if export is not None else None
    if export is not None and len(run_dirs) > 1:
        raise GbError("--export: takes one DIR (the run or sweep whose solutions it writes)")
    if export is not None:
        rows, written = export_solutions(run_dirs[0], export, progress=fmt == "table", tol=tol)
    else:
        rows, written = [], 0
        for d in run_dirs:   # several: each row says which DIR it came from
            rows += [{**r, "where": f"{d}/{r['where']}"} if len(run_dirs) > 1 else r
                     for r in verify(d, progress=fmt == "table", tol=tol)]   # progress: not into CSV or JSON
    shown = [{"where": r["where"], "objective": r["objective"],
              "value": None if isinstance(r["value"], float) and r["value"] != r["value"] else r["value"],
              "claimed status": r["claimed_status"],
              "verified": {True: "yes", False: "NO", None: "n/a"}[r["verified"]], "checked": r["checked"],
              "problems": "; ".join(r["problems"])} for r in rows]
    _emit_rows(shown, fmt, f"gb verify {' '.join(map(str, run_dirs))}")
    bad = [r for r in rows if r["verified"] is False]
    if fmt == "table":
        _echo(f"{len(rows) - len(bad)} of {len(rows)} verified (trained networks and programs; certificates at "
              f"tolerance {tol:g})"
              + (f"; {written} compact solutions -> {export / 'solutions'}" if export is not None else ""))
    if bad:
        _stderr(f"gb: {len(bad)} result(s) not verified: "
                + ", ".join(f"{r['where']}/{r['objective']}" for r in bad[:5]) + (" ..." if len(bad) > 5 else ""))
        raise typer.Exit(1)


@runs_app.callback(invoke_without_command=True)
def runs_cmd(ctx: typer.Context,
             root: Optional[str] = typer.Option(None, "--dir", "-d", help="where to look (default: runs/)"),
             where: List[str] = typer.Option([], "--where", "-w", metavar="KEY=VALUE",
                                             help="only runs whose config (or kind, status) has this value, e.g. "
                                                  "model.hidden_units=10 (repeatable)"),
             fmt: Format = FormatOpt):
    """List the runs and sweeps under a directory, newest first."""
    if ctx.invoked_subcommand is not None:
        return
    given = root is not None   # a --dir that names no directory is bad input; a project without runs/ has none yet
    root = _path("runs" if root is None else root, "--dir")
    if present(root) and not root.is_dir():
        raise GbError(f"--dir: {root}: not a directory")
    if given and not root.is_dir():
        raise GbError(f"--dir: {root}: no such directory")
    for w in where:
        if "=" not in w:
            raise GbError(f"--where {w[:60]!r}: expected KEY=VALUE")
    filters = {k.strip(): v.strip() for k, v in (w.split("=", 1) for w in where)}
    from gbcli.runs.index import scan

    infos = scan(root, filters)
    if not infos:
        _echo(f"no runs under {root}" + (" matching " + ", ".join(where) if where else ""))
        return
    _emit_rows([i.brief(root) if fmt == "table" else i.row(root) for i in infos], fmt, f"runs under {root}")


@runs_app.command("show")
def runs_show(run: str = typer.Argument(..., help="a run or sweep directory, or its name as `gb runs` prints it"),
              fmt: Format = FormatOpt):
    """Show one run or sweep: what it is, its stages, resolved config, provenance and results."""
    run = _named(run, "RUN")
    if fmt == "csv":   # one record of nested sections: no table to write as CSV
        raise GbError("--format: csv is for lists of runs (`gb runs`, `gb runs diff`); `gb runs show` prints a "
                      "table or json")
    if not run.is_dir():
        raise GbError(f"RUN: {run}: not a directory")
    from gbcli.runs.index import show

    rec = show(run)
    if fmt == "json":
        print(json.dumps(rec, indent=2, default=str))
        return
    import yaml

    _echo(f"{rec['path']}: {rec['kind']}, {rec['status']}" + (f" ({rec['note']})" if rec.get("note") else ""))
    if rec.get("point_of"):
        _echo(f"point {rec['point_of']['name']} of sweep {rec['point_of']['sweep']}")
    labels = rec.get("labels") or {}
    for key in ("name", "note"):
        if labels.get(key):
            _echo(f"{key}: {labels[key]}")
    if labels.get("tags"):
        _echo("tags: " + ", ".join(f"{k}={v}" for k, v in labels["tags"].items()))
    _echo("stages: " + (", ".join(f"{k} {v}" for k, v in rec["stages"].items()) or "none"))
    if rec.get("points"):   # a sweep: each point by its name (`gb runs show SWEEP/NAME`) and the axes it sets
        _emit_rows(rec["points"], "table", "points")
    if rec.get("results"):
        from gbcli.reports.views import by_field

        _emit_rows(by_field(rec["results"]), "table", "results")   # a column per stage: headers never cut
    elif rec.get("numbers"):
        _emit_rows([{"number": k, "value": v} for k, v in rec["numbers"].items()], "table", "results")
    if rec.get("config"):
        console.print("config:", highlight=False)
        for line in yaml.safe_dump(rec["config"], sort_keys=False).rstrip().splitlines():
            _echo(line)
    for what, prov in (rec.get("provenance") or {}).items():
        if isinstance(prov, dict):
            _echo(f"provenance ({what}): " + ", ".join(f"{k}={prov[k]}" for k in PROVENANCE_SHOWN if k in prov))


@runs_app.command("diff")
def runs_diff(a: str = typer.Argument(..., help="a run or sweep directory, or its name as `gb runs` prints it"),
              b: str = typer.Argument(..., help="another one"), fmt: Format = FormatOpt):
    """The config keys, stages and headline numbers that differ between two runs."""
    a, b = _named(a, "A"), _named(b, "B")
    for key, p in (("A", a), ("B", b)):
        if not p.is_dir():
            raise GbError(f"{key}: {p}: not a directory")
    from gbcli.runs.index import diff

    rows = diff(a, b)
    if not rows:
        _echo(f"{a} and {b}: no difference in config, stages or headline numbers")
        return
    _emit_rows([{"what": r["what"], "key": r["key"], str(a): r["a"], str(b): r["b"]} for r in rows], fmt,
               f"{a} vs {b}")


@runs_app.command("export")
def runs_export(target: str = typer.Argument(..., metavar="TARGET", help="mlflow (the only store so far)"),
                root: str = typer.Option("runs", "--dir", "-d", help="the runs to export (default: runs/)"),
                tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", metavar="URI",
                                                           help="an MLflow tracking URI (default: sqlite:///DIR/mlflow.db)"),
                experiment: str = typer.Option("gb", "--experiment", help="the MLflow experiment's name")):
    """Log every run and sweep (points as child runs) into an MLflow store: parameters, metric
    curves, results, provenance as tags, tables and figures as artifacts. Needs the `mlflow` extra."""
    if target != "mlflow":
        raise GbError(f"TARGET: {target[:40]!r} is not a known store (mlflow)")
    from gbcli.runs.mlflow_export import export

    export(_path(root, "--dir"), tracking_uri, experiment, echo=_echo)


@config_app.command("show")
def config_show(config: Path = ConfigArg, set_: List[str] = SetOpt):
    """Print the resolved config as YAML (preset, --set overrides and derived values applied):
    what `gb train-gd` would run and save as gd/config.yaml."""
    from gbcli.config import dump_config, load_config

    sys.stdout.write(dump_config(load_config(config, set_)))


@config_app.command("keys")
def config_keys(section: Optional[str] = typer.Argument(
                    None, metavar="SECTION",
                    help="a section (training, contexts, ...; top: the top level), model or dataset with all their "
                         "kinds, one kind (model.gln, dataset.mnist) or one key (training.lr); default: every section"),
                fmt: Optional[str] = typer.Option(None, "--format", "-f", metavar="FORMAT",
                                                  help="text (one line per key), table or json (default: a table "
                                                       "on a terminal, else text)")):
    """Every config key of every section and of every model and dataset kind: its type, default and
    description (read from the schema, which imports without torch)."""
    from gbcli.config import listing

    if fmt not in (None, "text", "table", "json"):
        raise GbError(f"--format: {fmt[:40]!r} is not one of text, table, json")
    rows = listing.rows(section)
    fmt = fmt or ("table" if console.is_terminal else "text")
    if fmt == "json":
        print(json.dumps(rows, indent=2))
    elif fmt == "text":
        sys.stdout.write(listing.render_text(rows))
    else:
        from rich.table import Table
        from rich.text import Text   # plain text: a description's [low, high] is not markup

        for title, group in listing.blocks(rows):
            table = Table(title=Text(title), title_justify="left")
            for column in ("key", "type", "default", "description"):
                table.add_column(column, overflow="fold")
            for r in group:
                table.add_row(*(Text(c) for c in (r["key"], listing.type_with_range(r), listing.default_text(r),
                                                  r["description"])))
            console.print(table)


def _bundled(name: str) -> bool:
    """NAME of `gb data fetch|verify` checked (the synthetic sets have no files); True for digits (bundled)."""
    from gbcli.data.sources import IMAGE_SETS

    known = (*IMAGE_SETS, "digits")
    if name not in known:
        raise GbError(f"NAME: {quoted(name)} is not one of {', '.join(known)} (the synthetic datasets have no files)")
    return name == "digits"


@data_app.command("fetch")
def data_fetch(name: str = typer.Argument(..., metavar="NAME", help="mnist or fashion-mnist (digits is bundled with scikit-learn)"),
               data_dir: Optional[Path] = DataDirOpt):
    """Download a dataset's files into the data directory (needs internet)."""
    from gbcli.data.sources import fetch

    if _bundled(name):
        _echo("digits: bundled with scikit-learn (nothing to fetch)")
        return
    path = fetch(name, data_dir)
    _echo(f"{name}: files in {path}")


@data_app.command("verify")
def data_verify(name: str = typer.Argument(..., metavar="NAME", help="mnist, fashion-mnist or digits"),
                data_dir: Optional[Path] = DataDirOpt):
    """Check a dataset's files against their published checksums."""
    from gbcli.data.sources import data_dir as resolve_dir, load_dataset, verify

    if _bundled(name):
        load_dataset("digits", train_size=1, val_size=1)
        _echo("digits: bundled with scikit-learn (no files to check): ok")
        return
    root = resolve_dir(data_dir)
    if present(root) and not root.is_dir():
        raise GbError(f"{'--data-dir' if data_dir is not None else 'GB_DATA_DIR'}: {root}: not a directory")
    _echo(f"{name}: checking the files in {root / name}")
    status = verify(name, data_dir)
    for f, s in status.items():
        _echo(f"{f}: {s}")
    if any(s != "ok" for s in status.values()):
        raise GbError(f"{name}: {sum(s != 'ok' for s in status.values())} file(s) missing or corrupt")


# typer >= 0.2x vendors its own click: its parse errors are not `click.ClickException`s
CLICK_ERRORS = (click.exceptions.ClickException, getattr(typer, "TyperException", click.exceptions.ClickException))


def _fail(msg: str, code: int = 2) -> None:
    """`gb: error: msg` as one printable line on stderr, and exit `code` (2: bad input)."""
    line = printable(" ".join(str(msg).split()))
    if len(line) > MAX_ERROR_LINE:   # a value we did not shorten at its source: the line stays readable
        line = f"{line[:MAX_ERROR_LINE - 200]} ... {line[-180:]}"
    _stderr(f"gb: error: {line}")
    sys.exit(code)


def _reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (`gb runs --format csv | head -1`)."""
    import select

    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def main() -> None:
    """Entry point: one-line errors, exit 2 for bad input (never a traceback); Ctrl-C or SIGTERM: one line,
    exit 130 (gbcli.interrupts); a reader that stops reading stdout (`| head -1`): exit 0, quietly."""
    from gbcli import interrupts

    interrupts.install()
    try:
        try:
            code = app(standalone_mode=False)
            sys.stdout.flush()   # a closed pipe shows here, not in the interpreter's last flush
        except typer.Exit as exc:   # sweep: 1 when a point failed
            sys.exit(exc.exit_code)
        except SystemExit as exc:   # click ends a write into a closed pipe with exit 1 and no word
            if exc.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper" and _reader_gone():
                sys.exit(0)
            raise
        except BrokenPipeError as exc:
            if not _reader_gone():   # another pipe than stdout's: an error as any OSError
                _fail(f"{exc.filename or ''}: {exc.strerror or exc}", code=1)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # the exit's own flush writes nowhere
            sys.exit(0)
        except OSError as exc:   # a full disk, a file that cannot be written: one line, not a traceback
            _fail(f"{exc.filename}: {exc.strerror or exc}" if exc.filename else f"{exc.strerror or exc}", code=1)
        except GbError as exc:
            _fail(str(exc))
        except CLICK_ERRORS as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `gb` / `gb data`: the help is the answer
                help_text = exc.format_message()
                if help_text.strip():
                    console.print(help_text, highlight=False, markup=False)
                sys.exit(2)
            _fail(exc.format_message())
        except (click.exceptions.Abort, typer.Abort, KeyboardInterrupt):
            _stderr(interrupts.line("SIGINT"))
            sys.exit(interrupts.EXIT_CODE)
        sys.exit(code or 0)
    except interrupts.Interrupted as exc:   # the work was stopped on its way here (a sweep's workers, its jobs)
        _stderr(interrupts.announce(exc))
        sys.exit(interrupts.EXIT_CODE)
    finally:   # a signal from here on (interpreter exit) ends the process at once, with the line
        interrupts.exiting()


if __name__ == "__main__":
    main()
