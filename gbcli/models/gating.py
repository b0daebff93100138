"""Gating: which context each input falls into (protocol section 3). A unit with k hyperplanes has
C = 2^k local contexts, the bits [w_j . x > b_j] (order: `context_index`); the global context of x is
the tuple of its local contexts over the H units. `svm-rc`'s random gates are the k = 1 case."""

from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


@dataclass
class Hyperplanes:
    """H units x k hyperplanes: normals (H, k, D), offsets (H, k), `raw_offsets` as drawn before median init
    (the published evaluation gates with those). Gated in the normals' dtype (float32: published draws)."""

    normals: np.ndarray
    offsets: np.ndarray
    raw_offsets: np.ndarray | None = None
    # (N_pool, H*k) sides of the pool from the very products its median offsets came from: the median
    # image of an odd pool lies on the hyperplane and takes the rule's side only with those products
    pool_sides: np.ndarray | None = None
    inclusive: bool = False   # the side is [w.x >= b] (svm-rc, protocol section 10), not [w.x > b]

    def local_contexts(self, x: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """(N, H) int64 local context of every input at every unit. `rows`: x is x_pool[rows], whose
        sides are taken from `pool_sides` when the offsets are the pool's medians."""
        H, k, D = self.normals.shape
        if k == 0:
            return np.zeros((x.shape[0], H), dtype=np.int64)
        if rows is not None and self.pool_sides is not None:
            side = self.pool_sides[rows]
        else:
            side = sides(projections(x, self.normals.reshape(H * k, D)), self.offsets.reshape(-1), self.inclusive)
        return context_index(side.reshape(-1, H, k))

    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {"normals": self.normals, "offsets": self.offsets}
        return out if self.raw_offsets is None else {**out, "raw_offsets": self.raw_offsets}


def context_index(side: np.ndarray) -> np.ndarray:
    """(..., k) hyperplane sides [w_j . x > b_j] -> (...) int64 local contexts in [0, 2^k), THE bit order:
    hyperplane 0 is the MOST significant bit, c = sum_j 2^(k-1-j) side_j (protocol sections 3 and 10, the
    published code's itertools.product table). The reference programs' groups and the initial weights'
    assignment to contexts depend on it."""
    side = np.asarray(side)
    k = side.shape[-1]
    return (side.astype(np.int64) << np.arange(k - 1, -1, -1, dtype=np.int64)).sum(-1, dtype=np.int64)


def context_sides(ctx: np.ndarray, k: int) -> np.ndarray:
    """The inverse of `context_index`: (...) local contexts -> (..., k) 0/1 sides of hyperplanes 0..k-1."""
    return (np.asarray(ctx, dtype=np.int64)[..., None] >> np.arange(k - 1, -1, -1, dtype=np.int64)) & 1


def projections(x: np.ndarray, normals: np.ndarray) -> np.ndarray:
    """x @ normals' in the normals' dtype. For float32 normals the inputs are rounded to float32 (as the
    published code's) but summed in float64 and rounded once: a float32 BLAS product depends on the
    thread count, and moved inputs within 1e-5 of a hyperplane across it between runs."""
    if normals.dtype != np.float32:
        return x @ normals.T
    return (_rounded_to_float32(x) @ normals.astype(np.float64).T).astype(np.float32)


_ROUNDED: dict[int, tuple[weakref.ref, np.ndarray]] = {}


def forget_dead() -> None:
    """Drop the rounded copies whose source array is gone."""
    for key in [k for k, (ref, _) in _ROUNDED.items() if ref() is None]:
        del _ROUNDED[key]


def _rounded_to_float32(a: np.ndarray) -> np.ndarray:
    """`a` rounded to float32, held in float64; kept while a large read-only `a` lives (a sweep worker
    gates the same 60,000-image pool at every point, and rounding costs more than the product)."""
    hit = _ROUNDED.get(id(a))
    if hit is not None and hit[0]() is a:
        return hit[1]
    out = a.astype(np.float32).astype(np.float64)
    if a.size >= 1_000_000 and not a.flags.writeable:
        forget_dead()
        _ROUNDED[id(a)] = (weakref.ref(a), out)
    return out


def sides(proj: np.ndarray, offsets: np.ndarray, inclusive: bool = False) -> np.ndarray:
    return proj >= offsets if inclusive else proj > offsets


def drawn(normals: np.ndarray, raw: np.ndarray | None, x_pool: np.ndarray, median_init: bool,
          inclusive: bool = False) -> Hyperplanes:
    """Hyperplanes of the drawn normals (H, k, D) and offsets `raw` (H, k) or, with median init, the per-hyperplane
    medians of the pool's projections (each halves the data; float32 normals: torch.quantile's, as published)."""
    H, k, D = normals.shape
    if not (median_init and k > 0):
        return Hyperplanes(normals, raw, raw, inclusive=inclusive)
    proj = projections(x_pool, normals.reshape(H * k, D))
    offsets = torch_median(proj).numpy() if normals.dtype == np.float32 else np.median(proj, axis=0)
    return Hyperplanes(normals, offsets.reshape(H, k), raw, sides(proj, offsets, inclusive), inclusive)


def sample_hyperplanes(units: int, count: int, x_pool: np.ndarray, seed: int, median_init: bool = True,
                       normal_std: float = 36.0, offset_std: float = 9.0) -> Hyperplanes:
    """Random hyperplane contexts: normals N(0, normal_std^2), offsets N(0, offset_std^2) or medians."""
    import torch

    k = int(np.log2(count))
    gen = torch.Generator().manual_seed(seed)
    dim = x_pool.shape[1]
    normals = (torch.randn(units, k, dim, generator=gen, dtype=torch.float64) * normal_std).numpy()
    raw = (torch.randn(units, k, generator=gen, dtype=torch.float64) * offset_std).numpy()
    return drawn(normals, raw, x_pool, median_init)


def published_hyperplanes(units: int, count: int, x_pool: np.ndarray, seed: int, median_init: bool = True,
                          normal_std: float = 36.0, offset_std: float = 9.0) -> Hyperplanes:
    """The published code's draw sequence (protocol section 10), float32: seed torch's global generator,
    build nn.Linear(D, H*k, bias=False) (its init consumes draws), redraw its weight N(0, normal_std^2)
    (row h*k + j: unit h, hyperplane j), then offsets N(0, offset_std^2), or with median init
    torch.quantile(W x, 0.5) over the pool. The caller's generator state is restored."""
    import torch

    k = int(np.log2(count))
    dim = x_pool.shape[1]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with warnings.catch_warnings():   # k = 0 (one context): an empty layer, which torch warns about
            warnings.filterwarnings("ignore", message="Initializing zero-element tensors")
            layer = torch.nn.Linear(dim, units * k, bias=False)
        w = torch.nn.init.normal_(layer.weight.detach(), std=normal_std)
        beta = torch.nn.init.normal_(torch.empty(units, k), std=offset_std)
    return drawn(w.numpy().reshape(units, k, dim), beta.numpy(), x_pool, median_init)


def torch_median(a: np.ndarray) -> torch.Tensor:
    """Column medians bit for bit as `torch.quantile(col, 0.5)` (the published median init): the two middle
    order statistics joined by torch.lerp, without quantile's full sort (0.2 s of each Figure 2 point)."""
    import torch

    n = a.shape[0]
    lo, hi = (n - 1) // 2, n // 2
    part = np.partition(a, [lo, hi], axis=0)
    return torch.lerp(torch.from_numpy(part[lo]), torch.from_numpy(part[hi]), 0.5 if lo != hi else 0.0)


def random_relu_gates(units: int, x_pool: np.ndarray, seed: int) -> Hyperplanes:
    """The random contexts of `svm-rc`: orthogonal-init normals with median offsets, one per unit."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    w = torch.empty(units, x_pool.shape[1], dtype=torch.float64)
    torch.nn.init.orthogonal_(w, generator=gen)
    return drawn(w.numpy()[:, None, :], None, x_pool, True, inclusive=True)   # the published gates: [w.x >= median]
