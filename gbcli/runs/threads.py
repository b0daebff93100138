"""How many threads torch and the BLAS numpy uses compute on.

The thread count decides the order of a product's sums, so a point re-run alone gives a sweep's
numbers bit for bit only on the same count (a fig3 ReLU net trained on 1 thread and on 2 ended 0.04
apart in its weights, 155 validation predictions of other sign); and on a machine whose cores are shared, threads that
wait for each other make a run several times slower (issue 13: `gbcli.train_gd` took 5.8-27.9 s on
every core against 1.1-1.3 s on one). Hence one count per process, chosen once:

- `limit_threads(n)`: the process's count (`gb train-gd/fit-svm/verify --threads`, a sweep's workers);
- `computing_threads(n)`: the count inside a block, the one before restored after it. The library's
  `train_gd` and `fit_svm` run inside it (`threads=`): the count set by `limit_threads` when the
  process chose one, else 1, as `gb train-gd` (issue 49).
"""

from __future__ import annotations

import contextlib
import functools
import inspect

import threadpoolctl
import torch

DEFAULT = 1
_chosen: int | None = None   # the process's count, once `limit_threads` was called


def limit_threads(threads: int | None) -> None:
    """`threads` threads for torch and for the BLAS numpy uses (OpenBLAS), in this process, from now
    on (None or 0: unchanged). Without the second, every numpy product (gating, predictions) ran on
    as many OpenBLAS threads as the machine has cores, next to the other jobs."""
    global _chosen
    if threads:
        torch.set_num_threads(threads)
        threadpoolctl.threadpool_limits(limits=threads, user_api="blas")
        _chosen = threads


def default_threads() -> int:
    """The count a library call computes on when not told: the process's choice, else 1."""
    return _chosen or DEFAULT


@contextlib.contextmanager
def computing_threads(threads: int | None = None):
    """torch and BLAS on `threads` threads inside the block (None: `default_threads()`), and on the
    counts they had before it after it."""
    n = threads or default_threads()
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with threadpoolctl.threadpool_limits(limits=n, user_api="blas"):
            yield n
    finally:
        torch.set_num_threads(before)


def threads_argument(fn):
    """`fn` with a keyword argument `threads` (default None: `default_threads()`), run inside
    `computing_threads(threads)`: the library API's stages compute on one thread unless told."""
    @functools.wraps(fn)
    def call(*args, threads: int | None = None, **kwargs):
        with computing_threads(threads):
            return fn(*args, **kwargs)

    sig = inspect.signature(fn)
    extra = inspect.Parameter("threads", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="int | None")
    call.__signature__ = sig.replace(parameters=[*sig.parameters.values(), extra])
    return call
