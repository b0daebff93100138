"""The local executor: a process pool of `jobs` workers (spawned), each task's points in one worker
with `threads` torch threads."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing.connection import wait as wait_for
from typing import Callable

from gbcli import interrupts
from gbcli.runs.executors.base import Executor, died, ran_since

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


class LocalPool(Executor):
    """`fn(*task, threads)` for every task in a pool of `jobs` processes, with `threads` torch
    threads each (None: the cores split, jobs x threads <= cores). One thread per job is the
    default: on a machine whose cores are shared, two threads per job ran 2-10x slower than one
    (benchmarks in BENCHMARKS.md)."""

    name = "local"

    def __init__(self, jobs: int, threads: int | None = 1):
        super().__init__(jobs)
        self.threads = threads or max(1, (os.cpu_count() or 1) // jobs)
        self.pool = None
        self.start = time.time()

    def submit(self, fn: Callable, tasks: list[tuple]) -> list:
        # not `with ProcessPoolExecutor`: its exit waits for every queued task, so an interrupt would
        # let the whole grid run first; the pool is shut down when done, or stopped (`cancel`)
        self.start = time.time()
        self.pool = ProcessPoolExecutor(self.jobs, mp_context=mp.get_context("spawn"), initializer=_die_with_parent)
        return [self.pool.submit(fn, *t, self.threads) for t in tasks]

    def wait(self, pending: list, timeout: float) -> list:
        done, _ = wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
        finished = [f for f in pending if f in done]
        if finished and len(finished) == len(pending):
            self.pool.shutdown(wait=True)
        return finished

    def result(self, handle, task: tuple) -> list[dict]:
        try:
            return handle.result()
        except Exception as exc:   # the worker died (killed, out of memory): its points failed
            return died(task[1], "worker", "", f"the worker process died: {type(exc).__name__}: {exc}")

    def cancel(self, pending: list, tasks: dict):
        # the points of tasks that returned wrote their own records (read before the pool fails the rest)
        recorded = {d for f in pending if _returned(f) for d in tasks[f][1]}
        if self.pool is not None:
            _stop_pool(self.pool)
        return (lambda d: d not in recorded and ran_since(d, self.start)), ""


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


