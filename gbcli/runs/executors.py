"""Where a sweep's points run: a local process pool or a Slurm job array (through submitit).

Both take a function and its argument tuples (the point's config and directory), so they know
nothing of what a point does; progress shows points done, failed and running, and an ETA.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Callable

import submitit
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from gbcli.errors import GbError
from gbcli.io import write_json


def _die_with_parent() -> None:
    """Worker initializer: on Linux, get SIGKILLed when the sweep process dies (kill -9 included),
    so no orphan keeps writing into a directory that a rerun owns."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def run_local(fn: Callable, tasks: list[tuple], jobs: int, progress: bool, echo, threads: int | None = 1) -> None:
    """`fn(*task, threads)` for every task in a pool of `jobs` processes, with `threads` torch
    threads each (None: the cores split, jobs x threads <= cores). One thread per job is the
    default: on a machine whose cores are shared, two threads per job ran 2-10x slower than one
    (issue 13; benchmarks in BENCHMARKS.md). A task is a group of points: its second element is
    the list of their directories, and `fn` returns one record per point."""
    threads = threads or max(1, (os.cpu_count() or 1) // jobs)
    tasks = [(*t, threads) for t in tasks]
    with _Progress(sum(len(t[1]) for t in tasks), progress, echo) as bar, ProcessPoolExecutor(
            jobs, mp_context=mp.get_context("spawn"), initializer=_die_with_parent) as pool:
        futures = {pool.submit(fn, *t): t for t in tasks}
        pending = set(futures)
        bar.running(_points(pending, futures, jobs))
        for fut in as_completed(futures):
            pending.discard(fut)
            try:
                results = fut.result()
            except Exception as exc:   # the worker died (killed, out of memory): its points failed
                results = _died(futures[fut][1], "worker", "", f"the worker process died: {type(exc).__name__}: {exc}")
            for result, d in zip(results, futures[fut][1]):
                bar.finished(result, Path(d).name)
            bar.running(_points(pending, futures, jobs))


def _points(pending: set, futures: dict, jobs: int) -> int:
    """Points in the (at most `jobs`) tasks running now: the first pending ones, in submission order."""
    return sum(len(futures[f][1]) for f in [f for f in futures if f in pending][:jobs])


def _died(dirs: list[str], stage: str, log: str, message: str) -> list[dict]:
    """The record of each point of a task that died, written to its failed.json when possible."""
    result = {"status": "failed", "stage": stage, "log": log, "message": message.splitlines()[0] if message else ""}
    for d in dirs:
        try:
            write_json(Path(d) / "failed.json", result)
        except OSError:
            pass
    return [result] * len(dirs)


def check_slurm() -> None:
    if not shutil.which("sbatch"):
        raise GbError("--executor slurm: no `sbatch` on PATH (is Slurm installed? scripts/slurm-cluster.sh "
                      "start brings up a single-node cluster)")
    if subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30).returncode != 0:
        raise GbError("--executor slurm: the Slurm controller does not answer (`sinfo` fails)")


def run_slurm(fn: Callable, tasks: list[tuple], jobs: int, opts: dict, out: Path, progress: bool, echo) -> None:
    """`fn(*task, cpus)` for every task as one submitit job array; the sweep process waits and
    shows progress. A task that dies (time limit, memory, node) gets its point's failed.json."""
    ex = submitit.AutoExecutor(folder=out / "slurm" / "%j")
    params = {"timeout_min": opts["time_min"], "cpus_per_task": opts["cpus"], "mem_gb": opts["mem_gb"],
              "slurm_array_parallelism": jobs}
    if opts.get("partition"):
        params["slurm_partition"] = opts["partition"]
    ex.update_parameters(**params)
    tasks = [(*t, opts["cpus"]) for t in tasks]
    submitted = ex.map_array(fn, *map(list, zip(*tasks)))
    echo(f"submitted Slurm array {submitted[0].job_id.split('_')[0]} ({len(submitted)} tasks)")
    pending = dict(zip(submitted, tasks))
    with _Progress(sum(len(t[1]) for t in tasks), progress, echo) as bar:
        while pending:
            for job in [j for j in pending if j.done()]:
                task = pending.pop(job)
                try:
                    results = job.result()
                except Exception as exc:  # the task died (time limit, memory, node): record it
                    results = _died(task[1], "slurm", str(job.paths.stderr),
                                    f"Slurm task {job.job_id}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                for result, d in zip(results, task[1]):
                    bar.finished(result, Path(d).name)
            bar.running(sum(len(t[1]) for t in pending.values()))
            if pending:
                time.sleep(1)


class _Progress:
    """Points done / failed / running and an ETA: a rich bar on a terminal, log lines otherwise."""

    def __init__(self, total: int, show: bool, echo):
        self.total, self.show, self.echo = total, show, echo
        self.count = self.failed = 0

    def __enter__(self):
        if self.show:
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
