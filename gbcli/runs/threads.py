"""How many threads torch and numpy's BLAS compute on: one count per process, since it decides the order
of a product's sums (a sweep's numbers bit for bit), and threads waiting on shared cores slow a run."""

from __future__ import annotations

import functools
import inspect

import threadpoolctl
import torch

_chosen: int | None = None   # the process's count, once `limit_threads` was called


def limit_threads(threads: int | None) -> None:
    """`threads` threads for torch and numpy's BLAS (else all cores) in this process from now on (0: unchanged)."""
    global _chosen
    if threads:
        torch.set_num_threads(threads)
        threadpoolctl.threadpool_limits(limits=threads, user_api="blas")
        _chosen = threads


def threads_argument(fn):
    """`fn` with a keyword argument `threads`: torch and BLAS on that many threads during the call
    (None: the process's count, else 1), and on the counts they had before after it."""
    @functools.wraps(fn)
    def call(*args, threads: int | None = None, **kwargs):
        n = threads or _chosen or 1
        before = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            with threadpoolctl.threadpool_limits(limits=n, user_api="blas"):
                return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(before)

    sig = inspect.signature(fn)
    extra = inspect.Parameter("threads", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="int | None")
    call.__signature__ = sig.replace(parameters=[*sig.parameters.values(), extra])
    return call
