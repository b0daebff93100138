"""The `dataset` section of a config: one parameter class per kind of set, discriminated by
`dataset.name`, each with the keys that mean something for it and a `load()`.

- image sets (`mnist`, `fashion-mnist`, `digits`): labels from `positive_classes`, optional
  `classes` (e.g. a digit pair);
- synthetic sets (`linear-teacher`, `orthogonal`, `symmetric-gaussians`): `n_samples` points of dimension `dim`;
- `points` (paper 003): explicit training points, also used as the validation set.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal, Optional

import numpy as np
from pydantic import Field, StrictBool, StrictFloat, StrictInt, model_validator

from gbcli.data.sources import Dataset, load_dataset, split_indices
from gbcli.errors import GbError
from gbcli.schema import Section
from gbcli.text import shorten

SEED = dict(ge=0, lt=2 ** 63)
SOURCE_SIZES = {"mnist": 60000, "fashion-mnist": 60000, "digits": 1797}
IMAGE_DIMS = {"mnist": 784, "fashion-mnist": 784, "digits": 64}
VAL_DEFAULT = 12000   # protocol: 12,000 validation points, or what the set has left


class DatasetParams(Section):
    name: str = Field(description="the dataset kind")
    train_size: StrictInt = Field(500, ge=1, description="N: training points, drawn from the pool by the seeded split")
    val_size: Optional[StrictInt] = Field(None, ge=1, description="validation points, disjoint from the training "
                                                                 "points (default: min(12000, what the pool has left))")
    data_seed: StrictInt = Field(1, **SEED, description="seed of the train / validation split (torch's random_split "
                                                        "order)")

    def source_size(self) -> int:
        raise NotImplementedError

    def feature_dim(self) -> int:
        """D: the inputs' dimension (known before loading, for memory estimates)."""
        raise NotImplementedError

    def pool_bytes(self) -> int:
        """Memory the loaded set takes (float64 pool and the train / validation copies)."""
        n = self.source_size()
        return 8 * self.feature_dim() * (n + (self.train_size or n) + (self.val_size or n))

    def default_val_size(self) -> int:
        return max(1, min(VAL_DEFAULT, self.source_size() - self.train_size))

    def load(self) -> Dataset:
        raise NotImplementedError


def rescaled(ds: Dataset, max_norm: float | None) -> Dataset:
    """All points rescaled by one constant so the largest norm is `max_norm` (the geometry, and so
    separability, is unchanged)."""
    if max_norm is None:
        return ds
    s = max_norm / np.linalg.norm(ds.x_pool, axis=1).max()
    return dataclasses.replace(ds, x_train=ds.x_train * s, x_val=ds.x_val * s, x_pool=ds.x_pool * s)


def pixels_mapped(ds: Dataset, pixel_range: list[float]) -> Dataset:
    """An image set's pixels (all features but the last, the constant 1, which the sources keep in
    [-1, 1]) mapped affinely onto [low, high]; the default [-1, 1] returns the set unchanged."""
    low, high = pixel_range
    if (low, high) == (-1.0, 1.0):
        return ds

    def f(x: np.ndarray) -> np.ndarray:
        out = x.copy()
        out[:, :-1] = low + (high - low) * (x[:, :-1] + 1.0) / 2.0
        return out
    return dataclasses.replace(ds, x_train=f(ds.x_train), x_val=f(ds.x_val), x_pool=f(ds.x_pool))


MAX_NORM = Field(None, ge=1e-6, le=1e6, allow_inf_nan=False,   # beyond, float32 training and the programs overflow
                 description="rescale all points by one constant so the largest norm is this (paper 004: ||x|| <= 1)")


class ImageSet(DatasetParams):
    """MNIST, Fashion-MNIST (IDX files, checksummed) or scikit-learn's bundled 8x8 digits."""

    name: Literal["mnist", "fashion-mnist", "digits"] = Field(
        "digits", description="mnist, fashion-mnist (IDX files in data_dir: `gb data fetch`) or digits (scikit-learn's "
                              "8x8 digits); 28x28 or 8x8 pixels and a constant 1 feature")
    data_dir: Optional[str] = Field(None, description="default: $GB_DATA_DIR, else ~/.cache/gb/data")
    positive_classes: list[StrictInt] = Field(default_factory=lambda: [0, 1, 2, 3, 4],
                                              description="classes (0..9) labelled +1; the others are -1")
    classes: Optional[list[StrictInt]] = Field(
        None, description="keep only these classes (e.g. a digit pair [3, 5]); set val_size too")
    max_norm: Optional[StrictFloat] = MAX_NORM
    pixel_range: list[StrictFloat] = Field(
        default_factory=lambda: [-1.0, 1.0],
        description="[low, high]: pixel intensities mapped affinely onto this range (default [-1, 1], as "
                    "torchvision's Normalize(0.5, 0.5); [0, 1] is ToTensor alone); the constant 1 feature is kept")

    @model_validator(mode="after")
    def _range(self) -> "ImageSet":
        r = self.pixel_range
        if len(r) != 2 or not all(np.isfinite(r)) or not r[0] < r[1]:
            raise ValueError(f"dataset.pixel_range: need two finite numbers [low, high] with low < high, got {shorten(str(r))}")
        return self

    @model_validator(mode="after")
    def _classes(self) -> "ImageSet":
        c = self.classes
        if c is not None:
            if not 2 <= len(set(c)) <= 10 or any(not 0 <= k <= 9 for k in c):
                raise ValueError(f"dataset.classes: need at least two distinct classes in 0..9, got {shorten(str(c))}")
            if not set(c) & set(self.positive_classes) or set(c) <= set(self.positive_classes):
                raise ValueError(f"dataset.classes: {shorten(str(c))} must have both positive and negative classes "
                                 f"(dataset.positive_classes = {shorten(str(self.positive_classes))})")
        return self

    def source_size(self) -> int:
        return SOURCE_SIZES[self.name]

    def feature_dim(self) -> int:
        return IMAGE_DIMS[self.name] + 1   # a constant 1 feature is appended

    def load(self) -> Dataset:
        ds = load_dataset(self.name, train_size=self.train_size, val_size=self.val_size, data_seed=self.data_seed,
                          data_dir=self.data_dir, positive_classes=self.positive_classes, classes=self.classes)
        return rescaled(pixels_mapped(ds, self.pixel_range), self.max_norm)


class SyntheticSet(DatasetParams):
    n_samples: StrictInt = Field(500, ge=2, le=10_000_000,
                                 description="points generated (the pool; train_size + val_size at most)")
    dim: StrictInt = Field(20, ge=1, le=100_000, description="input dimension (before the bias feature)")
    synthetic_seed: StrictInt = Field(0, **SEED, description="seed of the generated points (and of their teacher "
                                                             "or direction)")
    bias: StrictBool = Field(False, description="append a constant 1 feature")
    max_norm: Optional[StrictFloat] = MAX_NORM

    def source_size(self) -> int:
        return self.n_samples

    def feature_dim(self) -> int:
        return self.dim + int(self.bias)

    def load(self) -> Dataset:
        extra = {"margin": self.margin} if hasattr(self, "margin") else {}
        ds = load_dataset(self.name, train_size=self.train_size, val_size=self.val_size, data_seed=self.data_seed,
                          n_samples=self.n_samples, dim=self.dim, synthetic_seed=self.synthetic_seed, bias=self.bias,
                          **extra)
        return rescaled(ds, self.max_norm)


class LinearTeacher(SyntheticSet):
    """Gaussian inputs labelled by a random linear teacher, points within `margin` of it dropped."""

    name: Literal["linear-teacher"] = Field(
        "linear-teacher", description="Gaussian inputs labelled by the sign of a random unit teacher <w*, x>")
    margin: StrictFloat = Field(0.0, ge=0, allow_inf_nan=False,
                          description="keep only points with |<w*, x>| >= margin (below 3)")


class Orthogonal(SyntheticSet):
    """An orthogonally separable set (paper 001)."""

    name: Literal["orthogonal"] = Field("orthogonal", description="an orthogonally separable set (paper 001)")


class SymmetricGaussians(SyntheticSet):
    """Paper 002's symmetric classes (section 6.3, appendix I): label +-1 with probability 1/2 and
    x ~ N(y mean_norm e, std^2 I), e a random unit vector; points with y <e, x> <= `margin` are drawn
    again, so the set is linearly separable (by e) and the classes are mirror images in distribution
    (Lemma 6.1's symmetry, approximately in a finite sample)."""

    name: Literal["symmetric-gaussians"] = Field(
        "symmetric-gaussians", description="two mirror-image Gaussian classes around +-mean_norm e (paper 002)")
    mean_norm: StrictFloat = Field(3.0, ge=0, allow_inf_nan=False, description="distance of each class mean from 0")
    std: StrictFloat = Field(1.0, gt=0, allow_inf_nan=False, description="standard deviation of every coordinate")
    margin: StrictFloat = Field(0.0, ge=0, allow_inf_nan=False, description="keep points with y <e, x> > margin")

    @model_validator(mode="after")
    def _reachable(self) -> "SymmetricGaussians":
        # a point is kept with probability P(N(mean_norm, std^2) > margin)
        if math.erfc((self.margin - self.mean_norm) / (self.std * math.sqrt(2.0))) / 2 < 1e-3:
            raise ValueError(f"dataset.margin: {self.margin} keeps fewer than 1 in 1000 points "
                             f"(mean_norm {self.mean_norm}, std {self.std})")
        return self

    def load(self) -> Dataset:
        rng = np.random.default_rng(self.synthetic_seed)
        e = rng.standard_normal(self.dim)
        e /= np.linalg.norm(e)
        xs, ys, count = [], [], 0
        while count < self.n_samples:
            y = rng.choice(np.array([-1.0, 1.0]), size=max(2 * self.n_samples, 1024))
            x = y[:, None] * self.mean_norm * e + self.std * rng.standard_normal((len(y), self.dim))
            keep = y * (x @ e) > self.margin
            xs.append(x[keep])
            ys.append(y[keep])
            count += int(keep.sum())
        x, y = np.concatenate(xs)[: self.n_samples], np.concatenate(ys)[: self.n_samples]
        if self.bias:
            x = np.hstack([x, np.ones((len(x), 1))])
        x.flags.writeable = False
        if self.train_size + self.val_size > self.n_samples:
            raise GbError(f"dataset.train_size + dataset.val_size = {self.train_size + self.val_size} exceeds "
                          f"dataset.n_samples = {self.n_samples}")
        ti, vi = split_indices(self.n_samples, self.train_size, self.val_size, self.data_seed)
        return rescaled(Dataset(self.name, x[ti], y[ti], x[vi], y[vi], x, ti, vi), self.max_norm)


class Points(DatasetParams):
    """Explicit training points (paper 003's constructions); validation = the same points."""

    name: Literal["points"] = Field("points", description="explicit points x, y; they are both the training and "
                                                          "the validation set")
    x: list[list[StrictFloat]] = Field(description="the inputs, one list per point")
    y: list[StrictInt] = Field(description="the labels, +1 or -1")
    train_size: Optional[StrictInt] = Field(None, ge=1, description="resolved: the number of points")
    val_size: Optional[StrictInt] = Field(None, ge=1, description="resolved: the number of points")
    data_seed: StrictInt = Field(1, **SEED, description="unused: a points set is not split")

    @model_validator(mode="after")
    def _shape(self) -> "Points":
        if not self.x:
            raise ValueError("dataset.x: needs at least one point")
        if len({len(r) for r in self.x}) != 1 or not self.x[0]:
            raise ValueError("dataset.x: every point needs the same (non-zero) number of coordinates")
        if not all(np.isfinite(v) and abs(v) <= 1e30 for r in self.x for v in r):   # the networks train in float32
            raise ValueError("dataset.x: every coordinate must be a finite number of magnitude at most 1e30")
        if len(self.y) != len(self.x):
            raise ValueError(f"dataset.y: {len(self.y)} labels for {len(self.x)} points")
        if any(v not in (-1, 1) for v in self.y):
            raise ValueError(f"dataset.y: labels must be +1 or -1, got {shorten(str(self.y))}")
        for key in ("train_size", "val_size"):
            v = getattr(self, key)
            if v is not None and v != len(self.x):
                raise ValueError(f"dataset.{key}: a points set uses all its {len(self.x)} points, got {v}")
        return self

    def source_size(self) -> int:
        return len(self.x)

    def feature_dim(self) -> int:
        return len(self.x[0])

    def default_val_size(self) -> int:
        return len(self.x)

    def load(self) -> Dataset:
        xa, ya = np.asarray(self.x, dtype=float), np.asarray(self.y, dtype=float)
        idx = np.arange(len(ya))
        return Dataset("points", xa, ya, xa.copy(), ya.copy(), xa, idx, idx)


# dataset.name -> its parameter class (the config's `dataset` section is a union over these)
DATASETS: dict[str, type[DatasetParams]] = {"mnist": ImageSet, "fashion-mnist": ImageSet, "digits": ImageSet,
                                            "linear-teacher": LinearTeacher, "orthogonal": Orthogonal,
                                            "symmetric-gaussians": SymmetricGaussians, "points": Points}
