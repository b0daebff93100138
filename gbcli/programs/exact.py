"""Products A'B whose only rounding is the final one, on float64 BLAS (for a V that cancels 1e8-fold).

Ozaki's error-free split: each column is cut into SLICES slices of beta bits (2 beta + log2(N) <= 53),
so BLAS computes each slice product exactly in any order; the remainder enters through two float64
products, and the partial products are summed with Neumaier's compensation (error ~ eps |A'B| +
eps^2 |A||B|). Cost: 11 float64 products instead of one."""

from __future__ import annotations

import math

import numpy as np
import torch

SLICES = 3   # slices per operand: 3 x 18 bits and more cover float64's 53 (the remainder takes the rest)


def bits_per_slice(n: int) -> int:
    """The widest slice for sums of n products: n 2^(2 beta) <= 2^53."""
    return max(1, (53 - math.ceil(math.log2(max(n, 2)))) // 2)


def split(m: torch.Tensor, beta: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Columns of m cut into SLICES slices of beta bits and the remainder, every step exact."""
    top = m.abs().amax(0)
    _, e = torch.frexp(torch.where(top > 0, top, torch.ones_like(top)))   # top < 2^e
    rest, parts = m, []
    for k in range(SLICES):
        quantum = torch.ldexp(torch.ones_like(top), e - beta * (k + 1))
        part = torch.round(rest / quantum) * quantum   # a power-of-two scaling and an integer: exact
        rest = rest - part                              # |rest| <= quantum / 2: exact
        parts.append(part)
    return parts, rest


class ExactProduct:
    """A'B for a fixed B (N x D) and any A (N x K), rounded once."""

    def __init__(self, b: torch.Tensor):
        self.b = b
        self.beta = bits_per_slice(b.shape[0])
        self.b_parts, self.b_rest = split(b, self.beta)

    def t(self, a: torch.Tensor) -> torch.Tensor:
        hi, lo = self._sum(a)
        return torch.as_tensor(hi + lo, device=self.b.device)

    def t_precise(self, a: torch.Tensor) -> np.ndarray:
        """A'B as a numpy long double array."""
        hi, lo = self._sum(a)
        return hi.astype(np.longdouble) + lo

    def _sum(self, a: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """(hi, lo): the slice and remainder products summed with Neumaier's compensation."""
        a_parts, a_rest = split(a, self.beta)
        terms = [ak.T @ bj for ak in a_parts for bj in self.b_parts]   # exact
        terms += [a_rest.T @ self.b, (a - a_rest).T @ self.b_rest]      # rounding relative to 2^-54 max|A|, max|B|
        hi, lo = np.zeros(tuple(terms[0].shape)), np.zeros(tuple(terms[0].shape))
        for term in terms:
            x = term.cpu().numpy()
            total = hi + x
            lo += np.where(np.abs(hi) >= np.abs(x), (hi - total) + x, (x - total) + hi)
            hi = total
        return hi, lo


class DoubleDouble(np.ndarray):
    """A float64 array (the high halves) carrying its low halves as `lo` (read by `combination(...,
    precise=True)`); any array derived from it has lo None, so it degrades to the high halves."""

    lo: np.ndarray | None = None

    def __array_finalize__(self, obj) -> None:
        self.lo = None


def double_double(hi: np.ndarray, lo: np.ndarray) -> DoubleDouble:
    out = np.array(hi, dtype=np.float64).view(DoubleDouble)
    out.lo = np.array(lo, dtype=np.float64)
    return out
