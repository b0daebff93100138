"""The `gb` command line: a thin layer over the library API (`gbcli.runs`, `gbcli.reports`, `gbcli.data`).

The heavy modules (torch, the registry) are imported inside the commands, once the arguments are
parsed, so `gb --help` and argument errors answer at once; nothing imports this module."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import click
import typer
from rich.console import Console

from gbcli.errors import GbError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="gb: train GD networks, solve their max-margin programs, compare them.")
data_app = typer.Typer(no_args_is_help=True, help="Fetch or verify dataset files.")
app.add_typer(data_app, name="data")
console = Console()
if not console.is_terminal:  # logs and pipes: wide enough that table headers are not cut
    console = Console(width=160)
err_console = Console(stderr=True)

OutOpt = typer.Option(None, "--out", metavar="DIR", help="run directory (default: output.dir, else runs/<config name>)")
SetOpt = typer.Option([], "--set", metavar="KEY.PATH=VALUE",
                      help="override a config value, e.g. --set training.momentum=0.9 (repeatable; the value is YAML)")
QuietOpt = typer.Option(False, "--quiet", "-q", is_flag=True, metavar="", help="no progress bars (a flag)")
ConfigArg = typer.Argument(..., help="the YAML config file (see README: Config)")
RunDirArg = typer.Argument(..., help="a run directory (or a sweep's --out directory)")
DataDirOpt = typer.Option(None, "--data-dir", metavar="DIR",
                          help="the data directory holding mnist/ and fashion-mnist/ (default: $GB_DATA_DIR, "
                               "else ~/.cache/gb/data)")
USABLE = ("ok", "optimal")   # statuses that are results; a certified infeasibility is an answer too


def _failed(rows) -> list[str]:
    """Predictors whose status is not a result: diverged, nan, inaccurate, failed, uncertified."""
    return [f"{r['predictor']} ({r['status']})" for r in rows
            if not (r["status"] in USABLE or (r["status"] == "infeasible" and bool(r.get("certified"))))]


def _version(value: bool) -> None:
    if value:
        from gbcli import __version__

        console.print(f"gb {__version__}", highlight=False)
        raise typer.Exit(0)


@app.callback()
def _main(version: bool = typer.Option(False, "--version", is_flag=True, is_eager=True, callback=_version, metavar="",
                                       help="print the version and exit")):
    """gb: train GD networks, solve their max-margin programs, compare them."""


def _echo(msg: str) -> None:
    console.print(msg, highlight=False)


def _load(config: Path, overrides: List[str]):
    from gbcli.config import load_config

    return load_config(config, tuple(overrides))


def _print_tables(errors, incons) -> None:
    from gbcli.reports.tables import rich_table

    show = ["predictor", "hidden_units", "contexts", "train_size", "train_error", "val_error", "status",
            "objective", "solve_seconds", "rel_gap", "certified"]
    if "point" in errors.columns:
        show = ["point"] + show
    console.print(rich_table(errors, "errors", show))
    cols = ["predictor_a", "predictor_b", "inconsistency", "expected_if_uncorrelated", "gd_val_error",
            "svm_val_error", "gd_status"]
    if "point" in incons.columns:
        cols = ["point"] + cols
    console.print(rich_table(incons, "inconsistency (validation)", cols))


@app.command("train-gd")
def train_gd_cmd(config: Path = ConfigArg, out: Optional[str] = OutOpt, set_: List[str] = SetOpt, quiet: bool = QuietOpt):
    """Train the configured network by gradient descent."""
    from gbcli.config import run_dir_for

    cfg = _load(config, set_)
    run_dir = run_dir_for(cfg, out)
    from gbcli.runs.stages import train_gd  # torch: only once the input is known to be valid

    s = train_gd(cfg, run_dir, progress=not quiet)
    _echo(f"{s['predictor']}: train error {s['train_error']:.4f}, val error {s['val_error']:.4f}, "
          f"{s['steps']} steps in {s['seconds']:.1f} s -> {run_dir / 'gd'}")
    if s["status"] != "ok":
        err_console.print(f"gb: training {s['status']}: {s.get('message', '')} (status in {run_dir / 'gd' / 'summary.json'})",
                          highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(1)


@app.command("fit-svm")
def fit_svm_cmd(config: Path = ConfigArg, out: Optional[str] = OutOpt, set_: List[str] = SetOpt,
                objective: List[str] = typer.Option([], "--objective", metavar="NAME",
                                                    help="a program to solve, e.g. svm-gln (repeatable; default: svm.objectives)"),
                solver: Optional[str] = typer.Option(None, "--solver", help="dual | ecos | osqp | clarabel | scs (each declares the norms it solves)"),
                quiet: bool = QuietOpt):
    """Solve the matching convex max-margin programs."""
    from gbcli.config import run_dir_for

    overrides = list(set_)
    if objective:
        overrides.append(f"svm.objectives=[{', '.join(objective)}]")
    if solver:
        overrides.append(f"svm.solver={solver}")
    cfg = _load(config, overrides)
    run_dir = run_dir_for(cfg, out)
    from gbcli.runs.stages import fit_svm  # torch: only once the input is known to be valid

    results = fit_svm(cfg, run_dir, progress=not quiet, echo=_echo)
    _echo(f"results -> {run_dir / 'svm'}")
    bad = _failed(results)
    if bad:
        err_console.print(f"gb: warning: not a certified result: {', '.join(bad)} (see {run_dir / 'svm'}/*/result.json)",
                          highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(1)


@app.command("compare")
def compare_cmd(run_dir: Path = RunDirArg):
    """Write and print the error and inconsistency tables of a run directory (of a finished sweep:
    its aggregated tables). Exit code 1 when a row is not a result (diverged, uncertified, failed)."""
    from gbcli.reports.tables import read_tables
    from gbcli.runs.stages import compare_run

    if (run_dir / "points").is_dir() and not (run_dir / "gd").exists():   # a sweep directory
        errors, incons = read_tables(run_dir)
        _print_tables(errors, incons)
        _echo(f"a sweep: its aggregated tables are in {run_dir / 'tables'} (rerun `gb sweep` to update them)")
    else:
        errors, incons = compare_run(run_dir)
        _print_tables(errors, incons)
        _echo(f"tables -> {run_dir / 'tables'}")
    bad = _failed(errors.to_dict("records"))
    if bad:
        err_console.print(f"gb: warning: rows that are not results: {', '.join(dict.fromkeys(bad))}",
                          highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(1)


@app.command("plot")
def plot_cmd(run_dir: Path = RunDirArg):
    """Draw the four panels of protocol section 8 from the tables of a sweep or run directory
    (RUN_DIR/tables/{errors,inconsistency}.csv) into RUN_DIR/figures/."""
    from gbcli.reports.tables import read_tables
    from gbcli.runs.sweep import draw_figures

    errors, incons = read_tables(run_dir)
    for path in draw_figures(errors, incons, run_dir):
        _echo(f"figure -> {path}")


@app.command("sweep")
def sweep_cmd(config: Path = ConfigArg, out: Optional[str] = OutOpt, set_: List[str] = SetOpt, quiet: bool = QuietOpt,
              executor: Optional[str] = typer.Option(None, "--executor", help="local | slurm (default: sweep.executor)"),
              jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="points at once (default: sweep.jobs)"),
              partition: Optional[str] = typer.Option(None, "--partition", help="slurm partition"),
              time_min: Optional[int] = typer.Option(None, "--time", min=1, help="slurm minutes per point"),
              cpus: Optional[int] = typer.Option(None, "--cpus", min=1, help="slurm CPUs per point"),
              mem_gb: Optional[float] = typer.Option(None, "--mem", min=0.1, help="slurm GB per point"),
              threads: Optional[int] = typer.Option(None, "--threads", min=1,
                                                    help="local: torch threads per job (default: sweep.threads, 1)")):
    """Run a grid of configurations (`grid:` / `zip:` axes), aggregate tables and figures.
    Exit code 1 when a point failed (see tables/failures.csv)."""
    from gbcli.runs.sweep import run_sweep

    if executor not in (None, "local", "slurm"):
        raise GbError(f"--executor: {executor!r} is not one of local, slurm")
    slurm = {k: v for k, v in {"partition": partition, "time_min": time_min, "cpus": cpus,
                               "mem_gb": mem_gb}.items() if v is not None}
    errors, incons, failures = run_sweep(config, out, tuple(set_), executor, jobs, slurm, progress=not quiet,
                                         echo=_echo, threads=threads)
    if len(errors):
        from gbcli.reports.tables import overview, rich_table

        view = overview(errors, incons)
        console.print(rich_table(view, "sweep overview (mean over points)", list(view.columns)))
    if len(failures):
        for _, f in failures.iterrows():
            _echo(f"failed: point {f['point']} ({f['status']} at {f['stage']}): {f['message']} [log: {f['log']}]")
        raise typer.Exit(1)


def _data_name(name: str, known: tuple[str, ...]) -> None:
    """NAME of `gb data fetch|verify`: a dataset with files (the synthetic sets are made from the config)."""
    if name not in known:
        raise GbError(f"NAME: {name!r} is not one of {', '.join(known)} (the synthetic datasets have no files)")


@data_app.command("fetch")
def data_fetch(name: str = typer.Argument(..., metavar="NAME", help="mnist or fashion-mnist (digits is bundled with scikit-learn)"),
               data_dir: Optional[Path] = DataDirOpt):
    """Download a dataset's files into the data directory (needs internet)."""
    from gbcli.data.sources import IMAGE_SETS, fetch

    _data_name(name, (*IMAGE_SETS, "digits"))
    if name == "digits":
        _echo("digits: bundled with scikit-learn (nothing to fetch)")
        return
    path = fetch(name, data_dir)
    _echo(f"{name}: files in {path}")


@data_app.command("verify")
def data_verify(name: str = typer.Argument(..., metavar="NAME", help="mnist, fashion-mnist or digits"),
                data_dir: Optional[Path] = DataDirOpt):
    """Check a dataset's files against their published checksums."""
    from gbcli.data.sources import IMAGE_SETS, verify
    from gbcli.data.sources import data_dir as resolve_dir

    _data_name(name, (*IMAGE_SETS, "digits"))
    if name == "digits":
        from gbcli.data.sources import load_dataset

        load_dataset("digits", train_size=1, val_size=1)
        _echo("digits: bundled with scikit-learn (no files to check): ok")
        return
    _echo(f"{name}: checking the files in {resolve_dir(data_dir) / name}")
    status = verify(name, data_dir)
    for f, s in status.items():
        _echo(f"{f}: {s}")
    if any(s != "ok" for s in status.values()):
        raise GbError(f"{name}: {sum(s != 'ok' for s in status.values())} file(s) missing or corrupt")


# typer >= 0.2x vendors its own click: its parse errors are not `click.ClickException`s
CLICK_ERRORS = (click.exceptions.ClickException, getattr(typer, "TyperException", click.exceptions.ClickException))


def _fail(msg: str, code: int = 2) -> None:
    """Print `gb: error: msg` as one line on stderr and exit with `code` (2: bad input)."""
    err_console.print(f"gb: error: {' '.join(str(msg).split())}", highlight=False, markup=False, soft_wrap=True)
    sys.exit(code)


def main() -> None:
    """Entry point: one-line errors and exit code 2 for bad input, never a traceback."""
    try:
        code = app(standalone_mode=False)
    except typer.Exit as exc:   # sweep: 1 when a point failed
        sys.exit(exc.exit_code)
    except OSError as exc:   # a full disk, a file that cannot be written: one line, not a traceback
        where = exc.filename or ""
        _fail(f"{where}: {exc.strerror or exc}" if where else f"{exc.strerror or exc}", code=1)
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
        err_console.print("gb: interrupted", highlight=False)
        sys.exit(130)
    sys.exit(code or 0)


if __name__ == "__main__":
    main()
