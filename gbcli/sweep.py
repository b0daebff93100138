"""Grids of runs: a base config plus `grid:` axes (full product) and `zip:` axes (varied together).

Each point gets a stable id (a hash of its resolved config) and its own run directory
`OUT/points/<id>/`, where it runs `train-gd`, its `fit-svm` objectives and `compare`, logging to
`log.txt`. A point is done when `tables/errors.csv` exists (written last, atomically), so a rerun
skips finished points and redoes only unfinished stages. A point that fails (exception, NaN loss,
a solve without a certificate of optimality or infeasibility) writes `failed.json` and the sweep goes on. The sweep then writes
`OUT/tables/{errors,inconsistency,summary,failures}.csv` and `OUT/figures/`.

Points run in a local process pool (`executor: local`, `jobs` processes, torch threads split
between them) or as one Slurm job array through submitit (`executor: slurm`). An exclusive lock
on `OUT/.sweep.lock` keeps a second sweep off the same directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import time
import traceback
from pathlib import Path

import pandas as pd

from .config import Config, apply_preset, read_config, set_path, validate
from .errors import GbError
from .io import read_json, write_csv, write_json

NOT_IDENTITY = ("name", "output", "grid", "zip", "preset", "sweep")


def _non_default(values: dict, defaults: dict) -> dict:
    """The entries of `values` that differ from `defaults` (recursively)."""
    out = {}
    for k, v in values.items():
        d = defaults.get(k, object())
        if isinstance(v, dict) and isinstance(d, dict):
            v = _non_default(v, d)
            if v:
                out[k] = v
        elif v != d:
            out[k] = v
    return out


def point_id(cfg: Config) -> str:
    """Stable id of a grid point: a hash of the resolved config's values that differ from the
    defaults, so a new config key (with a default) leaves existing sweeps' ids unchanged."""
    d = _non_default(cfg.to_dict(), Config.model_construct().model_dump(mode="json"))
    for k in NOT_IDENTITY:
        d.pop(k, None)
    return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:10]


def _axes(raw: dict, key: str, path) -> dict:
    axes = raw.pop(key, None) or {}
    if not isinstance(axes, dict) or not all(isinstance(v, list) and v for v in axes.values()):
        raise GbError(f"{path}: {key}: must map dotted keys to non-empty lists of values")
    return axes


def expand(path: str | Path, overrides: tuple[str, ...] = ()) -> tuple[Config, list[Config]]:
    """The base config and the validated config of every point (refuses any invalid point)."""
    raw = read_config(path, overrides)
    grid, zipped = _axes(raw, "grid", path), _axes(raw, "zip", path)
    if len({len(v) for v in zipped.values()}) > 1:
        raise GbError(f"{path}: zip: all lists must have the same length "
                      f"({', '.join(f'{k}: {len(v)}' for k, v in zipped.items())})")
    base = validate(apply_preset(raw, str(path)), str(path))
    zip_rows = list(zip(*zipped.values())) or [()]
    points, seen = [], set()
    for values in itertools.product(*grid.values()):
        for zvalues in zip_rows:
            point, where = raw, {**dict(zip(grid, values)), **dict(zip(zipped, zvalues))}
            for key, value in where.items():
                point = set_path(point, key.split("."), value)
            cfg = validate(apply_preset(point, str(path)), f"{path} (grid point {where})")
            if point_id(cfg) not in seen:   # axes that do not change the config give one point
                seen.add(point_id(cfg))
                points.append(cfg)
    return base, points


# ------------------------------------------------------------------ one point


def is_done(run_dir: Path) -> bool:
    return (run_dir / "tables" / "errors.csv").is_file()


def run_point(cfg_dict: dict, run_dir: str, threads: int = 0) -> dict:
    """Run one point (in a worker process or a Slurm task); never raises: failures are recorded
    in `failed.json` and returned."""
    import torch

    from .config import Config
    from .pipeline import compare_run, fit_svm, prepare, train_gd

    if threads:
        torch.set_num_threads(threads)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in run_dir.rglob(".*.tmp"):   # temp files of a run killed mid-write
        stale.unlink(missing_ok=True)
    log_path = run_dir / "log.txt"
    start, stage = time.time(), "prepare"
    with open(log_path, "a") as log:
        echo = lambda msg: (log.write(msg + "\n"), log.flush())
        echo(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}")
        try:
            cfg = Config.model_validate(cfg_dict)
            problem = prepare(cfg)
            stage = "train-gd"
            if not (run_dir / "gd" / "summary.json").is_file():
                train_gd(cfg, run_dir, progress=False, problem=problem)
            summary = read_json(run_dir / "gd" / "summary.json")
            if summary["status"] != "ok":
                raise PointFailure("train-gd", f"training loss is {summary['train_loss']} (status {summary['status']})")
            stage = "fit-svm"
            todo = [o for o in cfg.svm.objectives if not (run_dir / "svm" / o / "result.json").is_file()]
            if todo:
                fit_svm(cfg, run_dir, todo, progress=False, problem=problem, echo=echo)
            bad = []
            for o in cfg.svm.objectives:
                r = read_json(run_dir / "svm" / o / "result.json")
                if not (r["status"] in ("optimal", "infeasible") and r["certified"]):
                    bad.append(f"{o}: {r['status']}{', not certified' if not r['certified'] else ''}"
                               + (f" ({r['message']})" if r["message"] else ""))
            if bad:
                raise PointFailure("fit-svm", "; ".join(bad))
            stage = "compare"
            compare_run(run_dir)
            (run_dir / "failed.json").unlink(missing_ok=True)
            echo(f"done in {time.time() - start:.1f} s")
            return {"status": "done", "seconds": time.time() - start}
        except Exception as exc:  # record and go on: one bad point must not stop a grid
            if isinstance(exc, PointFailure):
                stage, message = exc.stage, exc.message
            else:
                message = f"{type(exc).__name__}: {exc}".splitlines()[0]
                echo(traceback.format_exc())
            echo(f"FAILED at {stage}: {message}")
            record = {"status": "failed", "stage": stage, "message": message, "log": str(log_path.resolve()),
                      "seconds": time.time() - start}
            write_json(run_dir / "failed.json", record)
            return record


class PointFailure(Exception):
    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage, self.message = stage, message


def _die_with_parent() -> None:
    """Worker initializer: on Linux, get SIGKILLed when the sweep process dies (kill -9 included),
    so no orphan keeps writing into a directory that a rerun owns."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


# ------------------------------------------------------------------ the sweep


@contextlib.contextmanager
def sweep_lock(out: Path):
    """Exclusive lock on OUT/.sweep.lock (released by the kernel if the process dies)."""
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / ".sweep.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise GbError(f"{out}: another sweep is running on this directory (pid {other}); "
                      f"wait for it or use another --out") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    try:
        yield
    finally:
        os.close(fd)


def run_sweep(path: str | Path, out: str | Path | None = None, overrides: tuple[str, ...] = (),
              executor: str | None = None, jobs: int | None = None, slurm: dict | None = None,
              progress: bool = True, echo=print) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Run every unfinished point, then aggregate; returns (errors, inconsistency, failures)."""
    from .config import run_dir_for
    from .pipeline import dataset_of

    base, points = expand(path, overrides)
    executor = executor or base.sweep.executor
    jobs = jobs or base.sweep.jobs
    out = run_dir_for(base, out)
    # data-level checks (files, split sizes) for every distinct dataset, before any point runs
    for cfg in {json.dumps(p.dataset.model_dump(), sort_keys=True): p for p in points}.values():
        dataset_of(cfg)
    if executor == "slurm":
        _check_slurm()
    with sweep_lock(out):
        dirs = {point_id(p): out / "points" / point_id(p) for p in points}
        todo = [p for p in points if not is_done(dirs[point_id(p)])]
        echo(f"sweep {base.name}: {len(points)} points, {len(points) - len(todo)} done, running {len(todo)}"
             f" ({executor}, {jobs} at a time)")
        if todo:
            run = _run_slurm if executor == "slurm" else _run_local
            run(todo, dirs, jobs, {**base.sweep.model_dump(), **(slurm or {})}, out, progress, echo)
        return aggregate(out, points, echo)


def _tasks(todo: list[Config], dirs: dict, threads: int) -> list[tuple]:
    return [(p.model_dump(mode="json"), str(dirs[point_id(p)]), threads) for p in todo]


def _run_local(todo, dirs, jobs, _opts, out, progress, echo) -> None:
    """A pool of `jobs` processes; torch threads split so jobs x threads <= cores."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    threads = max(1, (os.cpu_count() or 1) // jobs)
    tasks = _tasks(todo, dirs, threads)
    with _Progress(len(todo), progress, echo) as bar, ProcessPoolExecutor(
            jobs, mp_context=mp.get_context("spawn"), initializer=_die_with_parent) as pool:
        futures = {pool.submit(run_point, *t): t for t in tasks}
        bar.running(min(jobs, len(tasks)))
        for fut in as_completed(futures):
            bar.finished(fut.result(), Path(futures[fut][1]).name)
            bar.running(min(jobs, len(tasks) - bar.count))


def _check_slurm() -> None:
    import shutil
    import subprocess

    if not shutil.which("sbatch"):
        raise GbError("--executor slurm: no `sbatch` on PATH (is Slurm installed? scripts/slurm-cluster.sh "
                      "start brings up a single-node cluster)")
    if subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30).returncode != 0:
        raise GbError("--executor slurm: the Slurm controller does not answer (`sinfo` fails)")


def _run_slurm(todo, dirs, jobs, opts, out, progress, echo) -> None:
    """One submitit job array; the sweep process waits and shows progress."""
    import submitit

    ex = submitit.AutoExecutor(folder=out / "slurm" / "%j")
    params = {"timeout_min": opts["time_min"], "cpus_per_task": opts["cpus"], "mem_gb": opts["mem_gb"],
              "slurm_array_parallelism": jobs}
    if opts.get("partition"):
        params["slurm_partition"] = opts["partition"]
    ex.update_parameters(**params)
    tasks = _tasks(todo, dirs, opts["cpus"])
    submitted = ex.map_array(run_point, *map(list, zip(*tasks)))
    echo(f"submitted Slurm array {submitted[0].job_id.split('_')[0]} ({len(submitted)} tasks)")
    pending = dict(zip(submitted, tasks))
    with _Progress(len(tasks), progress, echo) as bar:
        while pending:
            for job in [j for j in pending if j.done()]:
                task = pending.pop(job)
                try:
                    result = job.result()
                except Exception as exc:  # the task died (time limit, memory, node): record it
                    result = {"status": "failed", "stage": "slurm", "log": str(job.paths.stderr),
                              "message": f"Slurm task {job.job_id}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
                    write_json(Path(task[1]) / "failed.json", result)
                bar.finished(result, Path(task[1]).name)
            bar.running(len(pending))
            if pending:
                time.sleep(1)


class _Progress:
    """Points done / failed / running and an ETA: a rich bar on a terminal, log lines otherwise."""

    def __init__(self, total: int, show: bool, echo):
        self.total, self.show, self.echo = total, show, echo
        self.count = self.failed = 0

    def __enter__(self):
        if self.show:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("points"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("failed {task.fields[failed]}, running {task.fields[running]}"),
                                TextColumn("ETA"), TimeRemainingColumn())
            self.bar.__enter__()
            self.task = self.bar.add_task("sweep", total=self.total, failed=0, running=0)
        return self

    def __exit__(self, *exc):
        if self.show:
            self.bar.__exit__(*exc)

    def running(self, n: int) -> None:
        if self.show:
            self.bar.update(self.task, running=n)

    def finished(self, result: dict, pid: str) -> None:
        self.count += 1
        self.failed += result["status"] != "done"
        if self.show:
            self.bar.update(self.task, advance=1, failed=self.failed)
        if result["status"] != "done":
            self.echo(f"point {pid} FAILED at {result['stage']}: {result['message']} (log: {result['log']})")
        elif not self.show:
            self.echo(f"[{self.count}/{self.total}] point {pid} done ({result['seconds']:.0f} s)")


def aggregate(out: Path, points: list[Config], echo=print) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Concatenate the finished points' tables (one block per point: no duplicates however often the
    sweep was interrupted), list the failures, write OUT/tables/ and OUT/figures/."""
    from .figures import plot_sweep
    from .tables import summarize

    errs, incs, fails = [], [], []
    for cfg in points:
        pid = point_id(cfg)
        d = out / "points" / pid
        if is_done(d):
            errs.append(pd.read_csv(d / "tables" / "errors.csv").assign(point=pid))
            incs.append(pd.read_csv(d / "tables" / "inconsistency.csv").assign(point=pid))
        else:
            rec = read_json(d / "failed.json") if (d / "failed.json").is_file() else {
                "status": "not run", "stage": "", "message": "", "log": ""}
            fails.append({"point": pid, **{k: rec.get(k, "") for k in ("status", "stage", "message", "log")}})
    errors = pd.concat(errs, ignore_index=True) if errs else pd.DataFrame()
    incons = pd.concat(incs, ignore_index=True) if incs else pd.DataFrame()
    failures = pd.DataFrame(fails, columns=["point", "status", "stage", "message", "log"])
    tables = out / "tables"
    write_csv(tables / "errors.csv", errors)
    write_csv(tables / "inconsistency.csv", incons)
    write_csv(tables / "failures.csv", failures)
    if errs:
        write_csv(tables / "summary.csv", summarize(errors, incons))
        plot_sweep(errors, incons, out)
    echo(f"{len(points) - len(fails)} of {len(points)} points done, {len(fails)} failed"
         + (f": see {tables / 'failures.csv'}" if fails else ""))
    return errors, incons, failures
