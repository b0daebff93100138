"""Products A'B whose only rounding is the final one, on float64 BLAS.

On a nearly inseparable program the multipliers' combination V = sum_n lam_n y_n phi_n cancels (its
terms ~4e8 times larger than V at N = 48,000, H = 10), so a float64 product carries an error of
~4e-8 |V|, and the margins derived from V carry noise of order 1. numpy's long double gains only
11 bits and has no BLAS; mpmath is 100-1000x slower at these sizes.

The split (Ozaki's error-free scheme): every column of A and of B is cut into SLICES slices of
`beta` bits on a grid fixed by the column's largest entry, with 2 beta + log2(N) <= 53, so every
product of two slices and every partial sum over N is an integer multiple of one quantum below
2^53: BLAS computes each slice product A_k'B_j exactly, whatever its order of summation or use of
FMA. What is left below the last slice (2^-54 of the column's largest entry and less) enters
through two ordinary float64 products whose rounding is relative to that remainder. The SLICES^2
+ 2 partial products are then summed with Neumaier's compensation: the result's error is about
eps |A'B| + eps^2 |A||B| (double-double's). Cost: 11 float64 products instead of one."""

from __future__ import annotations

import math

import numpy as np
import torch

SLICES = 3   # slices per operand: 3 x 18 bits and more cover float64's 53 (the remainder takes the rest)


def bits_per_slice(n: int) -> int:
    """The widest slice for sums of n products: n 2^(2 beta) <= 2^53."""
    return max(1, (53 - math.ceil(math.log2(max(n, 2)))) // 2)


def split(m: torch.Tensor, beta: int, count: int = SLICES) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Columns of m cut into `count` slices of beta bits (each an integer multiple of its column's
    quantum 2^(e - beta (k+1)), |slice / quantum| <= 2^beta, with 2^e above the column's largest
    entry) and the remainder: m = sum(slices) + remainder, every step exact."""
    top = m.abs().amax(0)
    _, e = torch.frexp(torch.where(top > 0, top, torch.ones_like(top)))   # top < 2^e
    rest, parts = m, []
    for k in range(count):
        quantum = torch.ldexp(torch.ones_like(top), e - beta * (k + 1))
        part = torch.round(rest / quantum) * quantum   # a power-of-two scaling and an integer: exact
        rest = rest - part                              # |rest| <= quantum / 2: exact
        parts.append(part)
    return parts, rest


class ExactProduct:
    """A'B for a fixed B (N x D) and any A (N x K), rounded once (see the module's docstring);
    B's slices are computed once."""

    def __init__(self, b: torch.Tensor):
        self.b = b
        self.beta = bits_per_slice(b.shape[0])
        self.b_parts, self.b_rest = split(b, self.beta)

    def t(self, a: torch.Tensor) -> torch.Tensor:
        """A'B (K x D) in float64."""
        hi, lo = self._sum(a)
        return torch.as_tensor(hi + lo, device=self.b.device)

    def t_precise(self, a: torch.Tensor) -> np.ndarray:
        """A'B as a numpy long double array (the unrounded pair hi + lo added in long double)."""
        hi, lo = self._sum(a)
        return hi.astype(np.longdouble) + lo

    def _sum(self, a: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """The exact slice products and the two remainder products, summed with Neumaier's compensation
        (the partial sums are up to 2^-beta of the terms, far above a cancelled A'B): (hi, lo)."""
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
    """A float64 array (the high halves) that carries its low halves as `lo`: the interior-point
    method's multipliers once they are kept as double-doubles (ipm), whose V cancels below float64's
    resolution of lam. Everywhere it is a plain float64 array; `design.combination(..., precise=True)`
    reads `lo`. Any array derived from it (an index, a sum) has lo None: it degrades to the high
    halves, never to a wrong shape."""

    lo: np.ndarray | None = None

    def __array_finalize__(self, obj) -> None:
        self.lo = None


def double_double(hi: np.ndarray, lo: np.ndarray) -> DoubleDouble:
    out = np.array(hi, dtype=np.float64).view(DoubleDouble)
    out.lo = np.array(lo, dtype=np.float64)
    return out
