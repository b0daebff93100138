"""Gating: which context each input falls into (protocol section 3).

A unit with k hyperplanes has C = 2^k local contexts: the k bits [w_j . x > b_j] read as a
binary number (bit j for hyperplane j). The global context of x is the tuple of its local
contexts over the H units. The frozen random gates of `svm-rc` are the k = 1 case with
orthogonal-init normals and median offsets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Hyperplanes:
    """H units x k hyperplanes: normals (H, k, D) and offsets (H, k)."""

    normals: np.ndarray
    offsets: np.ndarray

    @property
    def units(self) -> int:
        return self.normals.shape[0]

    @property
    def count(self) -> int:
        """C = 2^k contexts per unit."""
        return 2 ** self.normals.shape[1]

    def local_contexts(self, x: np.ndarray) -> np.ndarray:
        """(N, H) int64 local context of every input at every unit."""
        H, k, D = self.normals.shape
        if k == 0:
            return np.zeros((x.shape[0], H), dtype=np.int64)
        side = (x @ self.normals.reshape(H * k, D).T > self.offsets.reshape(-1)).reshape(-1, H, k)
        return (side * (1 << np.arange(k))).sum(-1).astype(np.int64)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"normals": self.normals, "offsets": self.offsets}


def median_offsets(normals: np.ndarray, x_pool: np.ndarray) -> np.ndarray:
    """Per-hyperplane median of the projections of the pool: each hyperplane halves the data."""
    H, k, D = normals.shape
    proj = x_pool @ normals.reshape(H * k, D).T
    return np.median(proj, axis=0).reshape(H, k)


def sample_hyperplanes(units: int, count: int, x_pool: np.ndarray, seed: int, median_init: bool = True,
                       normal_std: float = 36.0, offset_std: float = 9.0) -> Hyperplanes:
    """Random hyperplane contexts: normals N(0, normal_std^2), offsets N(0, offset_std^2) or medians."""
    k = int(np.log2(count))
    gen = torch.Generator().manual_seed(seed)
    dim = x_pool.shape[1]
    normals = (torch.randn(units, k, dim, generator=gen, dtype=torch.float64) * normal_std).numpy()
    offsets = (torch.randn(units, k, generator=gen, dtype=torch.float64) * offset_std).numpy()
    if median_init and k > 0:
        offsets = median_offsets(normals, x_pool)
    return Hyperplanes(normals, offsets)


def random_relu_gates(units: int, x_pool: np.ndarray, seed: int) -> Hyperplanes:
    """The random contexts of `svm-rc`: orthogonal-init normals with median offsets, one per unit."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.empty(units, x_pool.shape[1], dtype=torch.float64)
    torch.nn.init.orthogonal_(w, generator=gen)
    normals = w.numpy()[:, None, :]
    return Hyperplanes(normals, median_offsets(normals, x_pool))


def one_hot(ctx: np.ndarray, count: int) -> np.ndarray:
    """(N, H) local contexts -> (N, H*C) 0/1 matrix E with column h*C + c (the row order of zeta)."""
    n, h = ctx.shape
    if n and (ctx.min() < 0 or ctx.max() >= count):
        raise ValueError(f"contexts must be in 0..{count - 1}, got values in {ctx.min()}..{ctx.max()}")
    e = np.zeros((n, h * count))
    e[np.arange(n)[:, None], np.arange(h) * count + ctx] = 1.0
    return e
