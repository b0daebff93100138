"""Datasets for binary classification: MNIST, Fashion-MNIST, scikit-learn digits, synthetic sets, explicit points.

Each kind is a parameter class (the config's `dataset` section, by `name`) owning its pool and its split: labels
in {-1, +1}, split as `torch.utils.data.random_split` does. Image files are read from a local data directory and
verified by the md5 of their decompressed bytes; only `fetch` writes there."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import http.client
import io
import math
import os
import re
import struct
import urllib.request
import weakref
import zlib
from pathlib import Path
from typing import Callable, ClassVar, Literal, Optional, Sequence, get_args

import numpy as np
from pydantic import Field, StrictBool, StrictFloat, StrictInt, ValidationError, field_validator, model_validator

from gbcli.errors import GbError, MissingInput
from gbcli.fs.safe import atomic_write_bytes
from gbcli.schema import Section
from gbcli.text import quoted, shorten

DEFAULT_DATA_DIR = Path.home() / ".cache" / "gb" / "data"
IMAGE_SETS = ("mnist", "fashion-mnist")
LABELS = {"mnist": "MNIST", "fashion-mnist": "Fashion-MNIST"}   # how messages name a set

# md5 of the DECOMPRESSED IDX files, so any mirror's gzip wrapper is accepted.
CHECKSUMS: dict[str, dict[str, str]] = {
    # The published MNIST values.
    "mnist": {
        "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
        "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
        "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
        "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
    },
    # Computed from Debian's package dataset-fashion-mnist (0.0~git20200523.55506a9-1),
    # files in /usr/share/datasets/fashion-mnist/, after gunzip.
    "fashion-mnist": {
        "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
        "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
        "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
        "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
    },
}
# Sizes of the decompressed IDX files (the same for both sets): a 16-byte header (magic, count,
# rows, columns) and 28x28 bytes per image; an 8-byte header and one byte per label. A file is read
# (and decompressed) only up to its size plus one chunk: a gzip bomb is refused, not inflated.
SIZES: dict[str, int] = {
    "train-images-idx3-ubyte": 16 + 60000 * 28 * 28,   # 47,040,016
    "train-labels-idx1-ubyte": 8 + 60000,               # 60,008
    "t10k-images-idx3-ubyte": 16 + 10000 * 28 * 28,     # 7,840,016
    "t10k-labels-idx1-ubyte": 8 + 10000,                # 10,008
}
CHUNK = 1 << 20   # bytes read (compressed) at a time
PIECE = 4 << 20   # bytes decompressed at a time
SPLIT_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
MIRRORS = {
    "mnist": (
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        "https://storage.googleapis.com/cvdf-datasets/mnist/",
    ),
    "fashion-mnist": ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
}
DOWNLOAD_TIMEOUT = 30.0  # seconds without data before a mirror is given up


def data_dir(override: str | Path | None = None) -> Path:
    """The data directory: `override` if given, else $GB_DATA_DIR, else DEFAULT_DATA_DIR."""
    chosen = str(override or "") or os.environ.get("GB_DATA_DIR")
    return Path(chosen).expanduser() if chosen else DEFAULT_DATA_DIR


@dataclasses.dataclass
class Dataset:
    """A binary classification set split into train and validation parts; `x_pool` holds every preprocessed
    input of the source set (shared through the in-process cache, so read-only)."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_pool: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray

    @property
    def dim(self) -> int:
        return int(self.x_train.shape[1])


# ----------------------------------------------------------------------------- the kinds of set

SEED = dict(ge=0, lt=2 ** 63)   # seeds: integers in [0, 2**63) (torch and numpy take them)
SOURCE_SIZES = {"mnist": 60000, "fashion-mnist": 60000, "digits": 1797}
IMAGE_DIMS = {"mnist": 784, "fashion-mnist": 784, "digits": 64}
VAL_DEFAULT = 12000   # protocol: 12,000 validation points, or what the set has left


class DatasetParams(Section):
    """A kind of set: its pool (`pool`), split by `load`, then preprocessed (`finish`)."""

    name: str = Field(description="the dataset kind")
    train_size: StrictInt = Field(500, ge=1, description="N: training points, drawn from the pool by the seeded split")
    val_size: Optional[StrictInt] = Field(None, ge=1, description="validation points, disjoint from the training "
                                                                 "points (default: min(12000, what the pool has left))")
    data_seed: StrictInt = Field(1, **SEED, description="seed of the train / validation split (torch's random_split "
                                                        "order)")
    EXCEEDED: ClassVar[str] = "the {n} samples of {name}"   # what a split larger than the pool exceeds

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

    def pool(self) -> tuple[np.ndarray, np.ndarray]:
        """Every input of the set (read-only when it may be shared) and its label in {-1, +1}."""
        raise NotImplementedError

    def finish(self, ds: Dataset) -> Dataset:
        """The split preprocessed (new arrays: the split itself may be shared)."""
        return ds

    def load(self) -> Dataset:
        x_pool, y_pool = self.pool()
        n_total, train_size = len(x_pool), self.train_size
        val_size = self.val_size if self.val_size is not None else self.default_val_size()
        if train_size + val_size > n_total:
            raise GbError(f"dataset.train_size + dataset.val_size = {train_size + val_size} exceeds "
                          + self.EXCEEDED.format(n=n_total, name=self.name))
        key = (id(x_pool), self.model_dump_json())
        hit = _SPLITS.get(key)
        if hit is not None and hit[0]() is x_pool:
            return self.finish(hit[1])
        import torch  # imported here: torch is slow to import and only needed for this permutation

        # the train and validation indices exactly as torch's random_split([train, rest, val]) with the seed
        perm = torch.randperm(n_total, generator=torch.Generator().manual_seed(self.data_seed)).numpy().astype(np.int64)
        train_idx, val_idx = perm[:train_size].copy(), perm[n_total - val_size:].copy()
        ds = Dataset(self.name, x_pool[train_idx], y_pool[train_idx], x_pool[val_idx], y_pool[val_idx], x_pool,
                     train_idx, val_idx)
        if not x_pool.flags.writeable:   # a cached (read-only) pool: keep the split, read-only too
            for a in (ds.x_train, ds.y_train, ds.x_val, ds.y_val, ds.train_idx, ds.val_idx):
                a.flags.writeable = False
            for k in [k for k, (ref, _) in _SPLITS.items() if ref() is None]:
                del _SPLITS[k]
            while len(_SPLITS) >= 4:
                del _SPLITS[next(iter(_SPLITS))]
            _SPLITS[key] = (weakref.ref(x_pool), ds)
        return self.finish(ds)


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
    EXCEEDED: ClassVar[str] = "the {n} images of {name}"

    @field_validator("positive_classes")
    @classmethod
    def _proper_subset(cls, v: list[int]) -> list[int]:
        if not 0 < len(set(v)) < 10 or any(not 0 <= c <= 9 for c in v):
            raise ValueError(f"must be a non-empty proper subset of 0..9, got {shorten(str(v))}")
        return v

    @model_validator(mode="after")
    def _range_and_classes(self) -> "ImageSet":
        r, c = self.pixel_range, self.classes
        if len(r) != 2 or not all(np.isfinite(r)) or not r[0] < r[1]:
            raise ValueError(f"dataset.pixel_range: need two finite numbers [low, high] with low < high, got {shorten(str(r))}")
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

    def pool(self) -> tuple[np.ndarray, np.ndarray]:
        root = None if self.name == "digits" else _data_root(self.data_dir)
        x, labels = _digits() if root is None else _image_pool(*_idx_files(self.name, root, "train"))
        if self.classes is not None:   # paper 002: digit pairs (read-only copies, like the cached pool)
            keep = np.isin(labels, self.classes)
            x, labels = x[keep], labels[keep]
            x.flags.writeable = labels.flags.writeable = False
        return x, np.where(np.isin(labels, self.positive_classes), 1.0, -1.0)

    def finish(self, ds: Dataset) -> Dataset:
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

    def draw(self) -> tuple[np.ndarray, np.ndarray]:
        """The n_samples generated inputs (without the bias feature) and their labels."""
        raise NotImplementedError

    def pool(self) -> tuple[np.ndarray, np.ndarray]:
        x, y = self.draw()
        if self.bias:
            x = _append_one(x)
        x.flags.writeable = False
        return x, y

    def finish(self, ds: Dataset) -> Dataset:
        return rescaled(ds, self.max_norm)


class LinearTeacher(SyntheticSet):
    """Gaussian inputs labelled by a random linear teacher, points within `margin` of it dropped."""

    name: Literal["linear-teacher"] = Field(
        "linear-teacher", description="Gaussian inputs labelled by the sign of a random unit teacher <w*, x>")
    margin: StrictFloat = Field(0.0, ge=0, allow_inf_nan=False,
                          description="keep only points with |<w*, x>| >= margin (below 3)")

    def draw(self) -> tuple[np.ndarray, np.ndarray]:
        return _linear_teacher(self.n_samples, self.dim, self.synthetic_seed, self.margin)[:2]


class Orthogonal(SyntheticSet):
    """An orthogonally separable set (paper 001).

    Phuong & Lampert's: x = s |g|, label s, kept if <x, z> >= 0 (z = (1, -1, 1, ...)): same-label points have
    positive inner products and opposite-label points negative ones."""

    name: Literal["orthogonal"] = Field("orthogonal", description="an orthogonally separable set (paper 001)")

    def draw(self) -> tuple[np.ndarray, np.ndarray]:
        n, dim = self.n_samples, self.dim
        rng = np.random.default_rng(self.synthetic_seed)
        z = np.where(np.arange(dim) % 2 == 0, 1.0, -1.0)
        xs, ys = [], []
        while sum(map(len, ys)) < n:
            batch = max(2 * n, 1024)
            h = np.abs(rng.standard_normal((batch, dim)))
            s = rng.choice(np.array([-1.0, 1.0]), size=batch)
            x = s[:, None] * h
            keep = (x @ z >= 0) & np.all(h > 0, axis=1)
            xs.append(x[keep])
            ys.append(s[keep])
        return np.concatenate(xs)[:n], np.concatenate(ys)[:n]


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
    EXCEEDED: ClassVar[str] = "dataset.n_samples = {n}"

    @model_validator(mode="after")
    def _reachable(self) -> "SymmetricGaussians":
        # a point is kept with probability P(N(mean_norm, std^2) > margin)
        if math.erfc((self.margin - self.mean_norm) / (self.std * math.sqrt(2.0))) / 2 < 1e-3:
            raise ValueError(f"dataset.margin: {self.margin} keeps fewer than 1 in 1000 points "
                             f"(mean_norm {self.mean_norm}, std {self.std})")
        return self

    def draw(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.synthetic_seed)
        e = rng.standard_normal(self.dim)
        e /= np.linalg.norm(e)
        xs, ys = [], []
        while sum(map(len, ys)) < self.n_samples:
            y = rng.choice(np.array([-1.0, 1.0]), size=max(2 * self.n_samples, 1024))
            x = y[:, None] * self.mean_norm * e + self.std * rng.standard_normal((len(y), self.dim))
            keep = y * (x @ e) > self.margin
            xs.append(x[keep])
            ys.append(y[keep])
        return np.concatenate(xs)[: self.n_samples], np.concatenate(ys)[: self.n_samples]


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


# dataset.name -> its parameter class (the config's `dataset` section is a union over these), named by each class
DATASETS: dict[str, type[DatasetParams]] = {name: cls for cls in (ImageSet, LinearTeacher, Orthogonal,
                                                                  SymmetricGaussians, Points)
                                            for name in get_args(cls.model_fields["name"].annotation)}


def load_dataset(name: str, **params) -> Dataset:
    """The set `name` with the keys of its kind (`DATASETS[name]`: train_size, val_size, data_seed;
    data_dir, positive_classes, classes; n_samples, dim, synthetic_seed, margin, bias, ...), validated
    as the config's `dataset` section is and loaded by its class; a GbError names a bad key."""
    _check_name(name)
    params = {k: str(v) if isinstance(v, Path) else v for k, v in params.items()}
    try:
        spec = DATASETS[name].model_validate({**params, "name": name})
    except ValidationError as exc:
        raise GbError(validation_message(exc.errors(), lambda loc: ".".join(map(str, ("dataset", *loc))) if loc else "",
                                         lambda _: "", {})) from None
    return spec.load()


MAX_MESSAGE = 400   # characters of a validation message (values in it are shortened where quoted)
OWN_KEY = re.compile(r"^[a-z_]+(\.[a-z_0-9]+)+(, [a-z_.]+)*: ")   # our messages that start with their key


def validation_message(errors: list, key: Callable[[tuple], str], hint: Callable[[tuple], str],
                       tags: dict[str, str]) -> str:
    """The first of pydantic's `errors` as one line naming its key (`key`: the dotted key of a location; `hint`:
    what an unknown key may have meant; `tags`: the key naming the kind of each section of several kinds); a
    quoted value is shortened."""
    err = errors[0]
    loc, kind, ctx = key(err["loc"]), err["type"], err.get("ctx", {})
    own = kind == "value_error" and "error" in ctx   # our validators' words: they show the value
    msg = shorten(str(ctx["error"]) if own else err["msg"], MAX_MESSAGE)
    if kind == "extra_forbidden":
        msg = f"{loc}: unknown key{hint(err['loc'])}"
    elif kind == "missing":
        msg = f"{loc}: required key is missing"
    elif kind == "union_tag_invalid":
        field = tags.get(loc, "kind")
        msg = f"{loc}.{field}: unknown {field} {quoted(ctx.get('tag'))} (one of {ctx.get('expected_tags')})"
    elif kind == "union_tag_not_found" or (kind == "model_attributes_type" and loc in tags):
        msg = f"{loc}: must be a mapping of keys, got {quoted(err.get('input'))}"
    elif not own or loc and not OWN_KEY.match(msg):   # a message that does not carry its key
        # a Union field (e.g. training.epochs: int or 'paper'): one error per member, same key
        alternatives = [shorten(e["msg"]) for e in errors[1:] if e["loc"] != err["loc"] and key(e["loc"]) == loc]
        msg += "".join(f"; or {alt[0].lower() + alt[1:]}" for alt in alternatives)
        got = err.get("input")
        shown = "" if own or isinstance(got, (dict, list)) or got is None else f" (got {quoted(got)})"
        msg = f"{loc}: {msg[0].lower() + msg[1:]}{shown}" if loc else msg
    return shorten(msg, MAX_MESSAGE)


# A sweep worker runs many points on the same split: the split (and its read-only arrays, which
# gating's float32 rounding then caches too) is kept per pool while the pool lives. Key: the pool
# object and the set's parameters; at most 4 splits.
_SPLITS: dict[tuple, tuple[weakref.ref, Dataset]] = {}


def forget_splits() -> None:
    """Drop the kept splits (a caller done with a dataset, e.g. `gb verify` moving to the next)."""
    _SPLITS.clear()


def _idx_files(name: str, root: Path, split: str) -> tuple[str, tuple[Path, Path], tuple]:
    """The cache key of a split's (images, labels) files: the name, the paths and their stamps."""
    paths = tuple(_find(name, root, f) for f in SPLIT_FILES[split])
    return name, paths, tuple((st.st_size, st.st_mtime_ns, st.st_ino) for st in map(Path.stat, paths))


@functools.lru_cache(maxsize=2)
def _image_pool(name: str, paths: tuple[Path, Path], stamps: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Preprocessed training images (N, 785) and raw labels of an image set."""
    images, labels = _load_idx_cached(name, paths, stamps)
    x = _append_one((images.reshape(len(images), -1) / 255.0 - 0.5) / 0.5)   # torchvision's Normalize(0.5, 0.5)
    x.flags.writeable = False
    return x, labels


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 8x8 digits, scaled to [-1, 1] plus a 1: read from the package's file, not through
    `load_digits`, whose import of scipy.stats costs 0.8 CPU seconds (tests check they are equal)."""
    import gzip
    import importlib.util

    spec = importlib.util.find_spec("sklearn")   # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise MissingInput("the digits dataset needs scikit-learn: pip install scikit-learn")
    with gzip.open(Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz") as fh:
        table = np.loadtxt(fh, delimiter=",")
    x, labels = _append_one((table[:, :-1] / 16.0 - 0.5) / 0.5), table[:, -1].astype(np.int64)
    x.flags.writeable = labels.flags.writeable = False
    return x, labels


def _linear_teacher(n: int, dim: int, seed: int, margin: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gaussian points labelled by a random unit teacher w*, keeping |<w*, x>| >= margin."""
    # A point passes with probability erfc(margin / sqrt 2); refuse hopeless margins up front.
    if math.erfc(margin / math.sqrt(2.0)) < 1e-3:
        raise GbError(
            f"dataset.margin = {margin} is too large: fewer than 1 in 1000 Gaussian points "
            f"have |<w*, x>| >= margin; use a margin below 3"
        )
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(dim)
    w /= np.linalg.norm(w)
    kept: list[np.ndarray] = []
    while sum(map(len, kept)) < n:
        x = rng.standard_normal((max(n, 1024), dim))
        proj = np.abs(x @ w)
        kept.append(x[(proj >= margin) & (proj > 0)])  # proj > 0 so that every label is +-1
    x = np.concatenate(kept)[:n]
    return x, np.sign(x @ w), w


def _append_one(x: np.ndarray) -> np.ndarray:
    return np.hstack([x, np.ones((len(x), 1))])


# ----------------------------------------------------------------------------- IDX files

def load_idx(name: str, split: str = "train", data_dir: str | Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Raw uint8 images (n, 28, 28) and labels (n,) of an image set, checksums verified (cached: read-only)."""
    if name not in IMAGE_SETS:
        raise GbError(f"dataset.name {quoted(name)} has no IDX files; image sets are: {', '.join(IMAGE_SETS)}")
    if split not in SPLIT_FILES:
        raise GbError(f"split {quoted(split)} is not one of: {', '.join(SPLIT_FILES)}")
    return _load_idx_cached(*_idx_files(name, _data_root(data_dir), split))


@functools.lru_cache(maxsize=4)
def _load_idx_cached(name: str, paths: tuple[Path, Path], stamps: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Decode an (images, labels) pair; `stamps` makes a changed file miss the cache."""
    images, labels = (_parse_idx(_read_checked(name, p, keep=True)[0], p) for p in paths)
    if images.ndim != 3 or images.shape[1:] != (28, 28):
        raise GbError(f"{paths[0]}: expected 28x28 images, the IDX header says shape {images.shape}")
    if labels.ndim != 1 or len(labels) != len(images):
        raise GbError(f"{paths[1]}: expected {len(images)} labels, the IDX header says shape {labels.shape}")
    if labels.size and labels.max() > 9:
        raise GbError(f"{paths[1]}: label {labels.max()} is not a class 0..9")
    return images, labels


def _parse_idx(data: bytes, path: str | Path) -> np.ndarray:
    """Decode an IDX file of unsigned bytes: magic 0 0 0x08 ndim, big-endian dims, data."""
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise GbError(f"{path}: not an IDX file (bad magic number)")
    if data[2] != 0x08:
        raise GbError(f"{path}: IDX data type {data[2]:#04x} is not unsigned byte (0x08)")
    ndim = data[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(data) < header:
        raise GbError(f"{path}: truncated IDX header ({ndim} dimensions, {len(data)} bytes)")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    expected = header + math.prod(dims)
    if len(data) != expected:
        raise GbError(
            f"{path}: IDX header says shape {dims} ({expected} bytes) but the file has {len(data)} bytes"
        )
    out = np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)
    out.flags.writeable = False   # cached and shared
    return out


def _read_checked(name: str, path: Path, keep: bool) -> tuple[bytes | bytearray | None, str | None]:
    """(data, None) when the contents of `path` (gunzipped for .gz files) have the size and md5 of that file of
    `name`, data None unless `keep`; else (None, the problem), or MissingInput with `keep`. Reads at most the
    size plus one chunk, so a file that decompresses to gigabytes (a gzip bomb) costs no more than a good one."""
    base = path.name.removesuffix(".gz")
    size = SIZES[base]
    try:
        with open(path, "rb") as f:
            if path.suffix == ".gz":
                data, digest, problem = _gunzip_bounded(f, size, keep)
            else:
                data = f.read(size + 1)   # at most size + 1 bytes, whatever the file claims
                problem = None if len(data) == size else _size_problem(len(data), size)
                digest = hashlib.md5(data, usedforsecurity=False).hexdigest()
    except OSError as exc:
        raise MissingInput(f"cannot read {path}: {exc.strerror or exc}") from None
    if problem is None and digest != CHECKSUMS[name][base]:
        problem = "checksum mismatch"
    if keep and problem is not None:
        raise MissingInput(f"{path} is corrupt ({problem}): delete it and run `gb data fetch {name}`")
    return (data if keep else None), problem


def _size_problem(n: int, size: int) -> str:
    return f"more than the {size:,} bytes of this file" if n > size else f"truncated: {n:,} of {size:,} bytes"


def _gunzip_bounded(f, size: int, keep: bool) -> tuple[bytearray | None, str | None, str | None]:
    """Stream-decompress the gzip file object `f` (any number of members), hashing as it goes and stopping as
    soon as the output exceeds `size` bytes: (data, md5, problem); a stream that is not gzip: a checksum mismatch."""
    out = memoryview(bytearray(size)) if keep else None
    md5 = hashlib.md5(usedforsecurity=False)
    n = 0
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = b""
    try:
        while True:
            if not pending:
                pending = f.read(CHUNK)
                if not pending:
                    break
            if d.eof:   # a further gzip member, or trailing zero padding
                if not pending.strip(b"\0"):
                    pending = b""
                    continue
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            piece = d.decompress(pending, min(size + 1 - n, PIECE))   # max_length >= 1 (0: no limit)
            if n + len(piece) > size:
                return None, None, _size_problem(n + len(piece), size)
            if out is not None:
                out[n:n + len(piece)] = piece
            md5.update(piece)
            n += len(piece)
            pending = d.unconsumed_tail or (d.unused_data if d.eof else b"")
    except zlib.error:
        return None, None, "checksum mismatch"
    if not d.eof:   # the stream ended early
        return None, None, "checksum mismatch" if n == 0 else _size_problem(n, size)
    if n != size:
        return None, None, _size_problem(n, size)
    return (out.obj if out is not None else None), md5.hexdigest(), None


def _find(name: str, root: Path, base: str) -> Path:
    """The .gz file, else the uncompressed one; GbError with a hint when neither exists."""
    folder = root / name
    for candidate in (folder / f"{base}.gz", folder / base):
        if candidate.is_file():
            return candidate
    raise MissingInput(
        f"{LABELS.get(name, name)} not found in {folder}: missing {folder / (base + '.gz')}; set GB_DATA_DIR "
        f"to a folder containing {name}/, or run `gb data fetch {name}` when online"
    )


def _data_root(override: str | Path | None) -> Path:
    path = data_dir(override)
    try:
        return path.resolve()
    except (OSError, RuntimeError) as exc:   # a symlink loop (RuntimeError before Python 3.13)
        raise MissingInput(f"{quoted(str(path))}: not a usable data folder ({str(exc)[:80]})") from None


# ----------------------------------------------------------------------------- verify / fetch

def verify(name: str, data_dir: str | Path | None = None) -> dict[str, str]:
    """Status of each IDX file of `name` (`_status`) by decompressed file name, the .gz file checked when present;
    {} for a set without files."""
    _check_name(name)
    if name not in IMAGE_SETS:
        return {}
    root = _data_root(data_dir)
    return {base: _status(name, root, base) for base in CHECKSUMS[name]}


def _status(name: str, root: Path, base: str) -> str:
    """"ok", "missing", "checksum mismatch" or "corrupt (<why>)" (a wrong decompressed size)."""
    try:
        path = _find(name, root, base)
    except GbError:
        return "missing"
    problem = _read_checked(name, path, keep=False)[1]
    return "ok" if problem is None else problem if problem == "checksum mismatch" else f"corrupt ({problem})"


def fetch(name: str, data_dir: str | Path | None = None, mirrors: Sequence[str] | None = None,
          progress: bool = True) -> Path:
    """Download the missing or corrupt .gz files of `name` into <data_dir>/<name>/, each from the first mirror
    (`mirrors`, else $GB_MIRRORS, comma-separated, else the defaults) whose copy passes the checksum, written
    atomically. A set without files needs nothing: the data directory is returned."""
    bases = [b for b, status in verify(name, data_dir).items() if status != "ok"]   # none for a set without files
    root = _data_root(data_dir)
    if bases:
        if mirrors is None:
            env = os.environ.get("GB_MIRRORS", "")
            mirrors = env.split(",") if env.strip() else MIRRORS[name]
        urls, bar = [m.strip() for m in mirrors if m.strip()], None
        if progress:
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

            bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                           console=Console(stderr=True), transient=False)
        with bar if bar is not None else contextlib.nullcontext():
            for base in bases:
                _fetch_file(name, root, base, urls, bar)
    return root / name if name in IMAGE_SETS else root


def _fetch_file(name: str, root: Path, base: str, urls: Sequence[str], bar) -> None:
    """Try each mirror for <base>.gz; keep the first copy with the right checksum."""
    file = f"{base}.gz"
    reasons = []
    for url in urls:
        source = url.rstrip("/") + "/" + file
        try:
            raw = _download(source, f"{name}/{file}", bar, limit=SIZES[base] + CHUNK)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            text = " ".join(str(getattr(exc, "reason", None) or exc).split())   # the error message on one line
            reasons.append(f"{source}: {type(exc).__name__}" + (f": {text}" if text else ""))
            continue
        _, digest, problem = _gunzip_bounded(io.BytesIO(raw), SIZES[base], keep=False)
        if problem is not None or digest != CHECKSUMS[name][base]:
            reasons.append(f"{source}: {problem or 'checksum mismatch'}")
            continue
        atomic_write_bytes(root / name / file, raw)
        return
    raise GbError(
        f"could not download {name}/{file} from any mirror ({'; '.join(reasons) or 'no mirrors given'}); "
        f"copy the files into {root / name} by hand"
    )


def _download(url: str, label: str, bar, limit: int) -> bytes:
    """The body of `url`, read in chunks to drive the progress bar; ValueError past `limit` bytes
    (a gzip of the file is never much larger than the file itself)."""
    buf = io.BytesIO()
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as resp:
        total = resp.headers.get("Content-Length")
        total = int(total) if total and total.isdigit() else None
        if total is not None and total > limit:
            raise ValueError(f"{total:,} bytes is larger than the file can be")
        task = bar.add_task(label, total=total) if bar is not None else None
        while chunk := resp.read(1 << 16):
            buf.write(chunk)
            if buf.tell() > limit:
                raise ValueError(f"more than {limit:,} bytes, larger than the file can be")
            if task is not None:
                bar.advance(task, len(chunk))
    return buf.getvalue()


def _check_name(name: str) -> None:
    if name not in DATASETS:
        raise GbError(f"dataset.name {quoted(name)} is not one of: {', '.join(DATASETS)}")
