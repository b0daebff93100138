"""The metrics of protocol section 7, in one place: error, predicted labels and inconsistency."""

from __future__ import annotations

import sys

import numpy as np


def error(out, y) -> float:
    """Fraction misclassified by sign(out) (numpy or torch): a point is correct only when y f(x) > 0, so
    ties and non-finite outputs (a diverged network) are errors."""
    torch = sys.modules.get("torch")   # a tensor exists only once torch is loaded: `gb compare` never loads it
    if torch is not None and isinstance(out, torch.Tensor):
        return float((~(torch.isfinite(out) & ((out * y) > 0))).float().mean())
    out = np.asarray(out)
    return float(np.mean(~(np.isfinite(out) & (out * y > 0))))   # +-inf is no label: an error whatever its sign


def labels(out: np.ndarray) -> np.ndarray:
    """Predicted labels sign(f): +1, -1, 0 for a tie, and NaN for a non-finite output (no label)."""
    out = np.asarray(out, dtype=np.float64)
    return np.where(np.isfinite(out), np.sign(out), np.nan)


def inconsistency(out_a: np.ndarray, out_b: np.ndarray) -> float:
    """Fraction of points on which two predictors' labels differ (a tie is its own label; a non-finite
    output has none, so it differs from every label, a non-finite one's included)."""
    return float(np.mean(labels(out_a) != labels(out_b)))


def expected_if_uncorrelated(p: float) -> float:
    """2p(1-p): inconsistency of two predictors with error p that are otherwise independent."""
    return 2 * p * (1 - p)
