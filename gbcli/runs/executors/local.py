"""The local executor: a spawned process pool of `jobs` workers, `threads` torch threads each."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing.connection import wait as wait_for
from typing import Callable

from gbcli import interrupts
from gbcli.runs.executors.base import Executor, died, ran_since

STOP_SECONDS = 3   # how long terminated workers get to exit before they are killed


def _die_with_parent() -> None:
    """Worker initializer: SIGINT ignored; SIGKILLed when the sweep dies (no orphan writes in a rerun's dirs)."""
    interrupts.worker_init()
    with contextlib.suppress(Exception):   # not Linux: no such guard
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        parent = mp.parent_process()
        if parent is not None and os.getppid() != parent.pid:   # the parent died before the prctl
            os._exit(1)


class LocalPool(Executor):
    """`fn(*task, threads)` for every task in a pool of `jobs` processes (threads None: the cores split)."""

    def __init__(self, jobs: int, threads: int | None = 1):
        super().__init__(jobs)
        self.threads = threads or max(1, (os.cpu_count() or 1) // jobs)
        self.pool = None
        self.start = time.time()

    def submit(self, fn: Callable, tasks: list[tuple]) -> list:
        # not `with ProcessPoolExecutor`: its exit would wait for every queued task after an interrupt
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
        recorded = {d for f in pending if f.done() and not f.cancelled() and f.exception() is None for d in tasks[f][1]}
        _stop_pool(self.pool)   # set: `run` cancels only what `submit` started
        return (lambda d: d not in recorded and ran_since(d, self.start)), ""


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel the queued tasks and end the workers now: SIGTERM, then SIGKILL after STOP_SECONDS (`_processes`,
    no public API, read before `shutdown` drops it); the pool then fails the rest (BrokenProcessPool)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        with contextlib.suppress(Exception):   # exited already
            p.terminate()
    left = {p.sentinel: p for p in procs}
    deadline = time.monotonic() + STOP_SECONDS
    while left and time.monotonic() < deadline:
        for s in wait_for(list(left), timeout=max(0.0, deadline - time.monotonic())):
            left.pop(s)
    for p in left.values():
        with contextlib.suppress(Exception):
            p.kill()
    if left:
        wait_for(list(left), timeout=STOP_SECONDS)

