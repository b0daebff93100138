"""The metrics of protocol section 7, in one place: error, predicted labels and inconsistency."""

from __future__ import annotations

import sys

import numpy as np


def error(out, y) -> float:
    """Fraction misclassified by sign(out) (numpy arrays or torch tensors); ties (out = 0) and
    non-finite outputs (NaN, a diverged network) count as errors: a point is correct only when
    y f(x) > 0 holds."""
    torch = sys.modules.get("torch")   # a tensor exists only once torch is loaded: `gb compare` never loads it
    if torch is not None and isinstance(out, torch.Tensor):
        return float((~((out * y) > 0)).float().mean())
    return float(np.mean(~(out * y > 0)))


def labels(out: np.ndarray) -> np.ndarray:
    """Predicted labels sign(f): +1, -1, and 0 for a tie."""
    return np.sign(out)


def inconsistency(out_a: np.ndarray, out_b: np.ndarray) -> float:
    """Fraction of points on which two predictors' labels differ (a tie is its own label)."""
    return float(np.mean(labels(out_a) != labels(out_b)))


def expected_if_uncorrelated(p: float) -> float:
    """2p(1-p): inconsistency of two predictors with error p that are otherwise independent."""
    return 2 * p * (1 - p)
