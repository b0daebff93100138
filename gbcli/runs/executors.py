"""Where a sweep's points run: a local process pool or a Slurm job array (through submitit).

Both take a function and its argument tuples (the point's config and directory), so they know
nothing of what a point does; progress shows points done, failed and running, and an ETA.

Interrupted (Ctrl-C, SIGTERM: `gbcli.interrupts`), both stop at once: the local pool cancels its
queued tasks and terminates its workers, the Slurm executor cancels its job array; the points that
were running get a failed.json with status "interrupted" (they are not done: a rerun runs them
again), and the exception goes on to the CLI, which prints one line and exits 130.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing.connection import wait as wait_for
from pathlib import Path
from typing import Callable

import submitit
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from gbcli import interrupts
from gbcli.errors import GbError
from gbcli.io import write_json
from gbcli.logs import LINE_FRACTION, LINE_SECONDS, clock

STOP_SECONDS = 3   # how long terminated workers get to exit before they are killed


def _die_with_parent() -> None:
    """Worker initializer: on Linux, get SIGKILLed when the sweep process dies (kill -9 included),
    so no orphan keeps writing into a directory that a rerun owns; SIGINT ignored (the sweep
    process stops its workers itself: `gbcli.interrupts.worker_init`)."""
    interrupts.worker_init()
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        parent = mp.parent_process()
        if parent is not None and os.getppid() != parent.pid:   # the parent died before the prctl
            os._exit(1)
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
    start = time.time()
    with _Progress(sum(len(t[1]) for t in tasks), progress, echo) as bar:
        # not `with ProcessPoolExecutor`: its exit waits for every queued task, so an interrupt
        # would let the whole grid run first; the pool is shut down below, or stopped (_stop_pool)
        pool = ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=_die_with_parent)
        futures: dict = {}
        try:
            with interrupts.deferred():   # the workers start (on submit) with SIGINT/SIGTERM held
                for t in tasks:
                    futures[pool.submit(fn, *t)] = t
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
            pool.shutdown(wait=True)
        except BaseException as exc:   # interrupted (or the sweep process failed): stop now, not after the queue
            running = [f for f in futures if not f.done()]   # before the pool fails them (BrokenProcessPool)
            _stop_pool(pool)
            _stopped([d for f in running if not _returned(f) for d in futures[f][1]], exc,
                     lambda d: _ran_since(d, start))
            raise


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel the queued tasks and end the workers now: SIGTERM, then SIGKILL for any still there
    after STOP_SECONDS (one that was still starting holds SIGTERM until its initializer ran).
    Python 3.11 has no public API for a pool's processes: `pool._processes` maps pid -> Process;
    it is read before `shutdown`, which drops it. The pool's own thread then sees its workers
    gone, fails the remaining futures (BrokenProcessPool) and ends, so the exit does not wait."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        try:
            p.terminate()
        except Exception:   # exited already
            pass
    left = {p.sentinel: p for p in procs}
    deadline = time.monotonic() + STOP_SECONDS
    while left and time.monotonic() < deadline:
        for s in wait_for(list(left), timeout=max(0.0, deadline - time.monotonic())):
            left.pop(s)
    for p in left.values():
        try:
            p.kill()
        except Exception:
            pass
    if left:
        wait_for(list(left), timeout=STOP_SECONDS)


def _returned(fut) -> bool:
    """Whether a task finished normally (its worker wrote its points' records) while the pool stopped."""
    return fut.done() and not fut.cancelled() and fut.exception() is None


def _ran_since(d: str, since: float) -> bool:
    """Whether point directory `d` was at work in this run: its log.txt (appended to when a point
    starts) or its lock (written when its training starts, in a group) changed since `since`."""
    for name in ("log.txt", ".gb.lock"):
        try:
            if (Path(d) / name).stat().st_mtime >= since - 1:
                return True
        except OSError:
            pass
    return False


def _stage(d: Path) -> str:
    """The stage a stopped point was in, as its files show it (gd/summary.json: trained)."""
    if not (d / "gd" / "summary.json").is_file():
        return "train-gd"
    return "compare" if (d / "tables").is_dir() else "fit-svm"


def _stopped(dirs: list[str], exc: BaseException, started: Callable[[str], bool]) -> None:
    """failed.json with status "interrupted" for each point of `dirs` that had started (`started`)
    and is not done (tables/errors.csv, written last): a rerun runs it again. Points of tasks that
    had finished wrote their own records; queued points never started and get nothing."""
    if isinstance(exc, (interrupts.Interrupted, KeyboardInterrupt)):   # the latter: library use, no handlers
        why = f"the sweep was interrupted ({getattr(exc, 'signame', 'SIGINT')}) while this point ran"
    else:
        why = f"the sweep process stopped ({type(exc).__name__}: {exc})".splitlines()[0] + " while this point ran"
    for d in map(Path, dirs):
        try:
            if not d.is_dir() or (d / "tables" / "errors.csv").is_file() or not started(str(d)):
                continue
            write_json(d / "failed.json", {"status": "interrupted", "stage": _stage(d),
                                           "message": f"{why}; rerun the sweep to run it again",
                                           "log": str((d / "log.txt").resolve()),
                                           "at": time.strftime("%Y-%m-%d %H:%M:%S")})
        except OSError:   # best effort: the point is not done either way
            pass


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
    with interrupts.deferred():   # an interrupt during sbatch waits for the job ids, to cancel them
        submitted = ex.map_array(fn, *map(list, zip(*tasks)))
    array = submitted[0].job_id.split('_')[0]
    pending = dict(zip(submitted, tasks))
    try:
        echo(f"submitted Slurm array {array} ({len(submitted)} tasks)")
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
    except BaseException as exc:   # interrupted: cancel the array (best effort), record the running points
        started = {str(Path(d)) for job, t in pending.items() if _slurm_state(job) != "PENDING" for d in t[1]}
        note = _cancel_array(array)
        _stopped([d for t in pending.values() for d in t[1]], exc, started.__contains__)
        if isinstance(exc, interrupts.Interrupted):
            exc.notes.append(note)
        else:
            echo(note)
        raise


def _slurm_state(job) -> str:
    """A job's last known state (submitit's cache: no Slurm call); UNKNOWN when there is none."""
    try:
        return str(job.watcher.get_state(job.job_id, mode="cache")).upper()
    except Exception:
        return "UNKNOWN"


def _cancel_array(array: str) -> str:
    """`scancel` the whole job array (its pending and running tasks) in one call, its output kept
    off the terminal (scancel complains about tasks that finished); what happened, for the user."""
    try:
        proc = subprocess.run(["scancel", array], capture_output=True, text=True, timeout=30)
        if proc.returncode == 0:
            return f"Slurm array {array} cancelled"
        why = (proc.stderr or proc.stdout).strip().splitlines()[0] if (proc.stderr or proc.stdout).strip() else \
            f"exit code {proc.returncode}"
    except (OSError, subprocess.SubprocessError) as exc:
        why = f"{type(exc).__name__}: {exc}"
    return f"Slurm array {array} may still run (scancel failed: {why}; run `scancel {array}`)"


class _Progress:
    """Points done / failed / running and an ETA. On a terminal, a rich bar; with output to a file
    (a Slurm log, nohup, CI), a plain line about every `LINE_SECONDS` or `LINE_FRACTION` of the
    points, and a last one; with `-q` (not `show`), only the failures. A failed point is always
    named on its own line."""

    def __init__(self, total: int, show: bool, echo):
        self.total, self.show, self.echo = max(int(total), 1), show, echo
        self.count = self.failed = 0
        self.bar = None
        self.start = self.last_line = time.perf_counter()
        self.last_fraction = 0.0

    def __enter__(self):
        if self.show and sys.stderr.isatty():
            self.bar = Progress(TextColumn("points"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("failed {task.fields[failed]}, running {task.fields[running]}"),
                                TextColumn("ETA"), TimeRemainingColumn())
            self.bar.__enter__()
            self.task = self.bar.add_task("sweep", total=self.total, failed=0, running=0)
        elif self.show:
            self.echo(f"sweep: {self.total} points to run")
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def running(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, running=n)

    def finished(self, result: dict, pid: str) -> None:
        self.count += 1
        self.failed += result["status"] != "done"
        if self.bar is not None:
            self.bar.update(self.task, advance=1, failed=self.failed)
        if result["status"] != "done":
            self.echo(f"point {pid} FAILED at {result['stage']}: {result['message']} (log: {result['log']})")
        if self.bar is None and self.show:
            now, fraction = time.perf_counter(), self.count / self.total
            if now - self.last_line >= LINE_SECONDS or fraction - self.last_fraction >= LINE_FRACTION \
                    or self.count == self.total:
                self._line()

    def _line(self) -> None:
        now = time.perf_counter()
        elapsed, fraction = now - self.start, min(self.count / self.total, 1.0)
        eta = f", ETA {clock(elapsed * (1 - fraction) / fraction)}" if 0 < fraction < 1 else ""
        self.echo(f"sweep: {self.count}/{self.total} points ({100 * fraction:.0f}%), {self.failed} failed, "
                  f"elapsed {clock(elapsed)}{eta}")
        self.last_line, self.last_fraction = now, fraction
