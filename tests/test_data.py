"""Tests of gbcli.data on the real MNIST files, sklearn digits, synthetic sets and a local mirror."""

from __future__ import annotations

import contextlib
import functools
import gzip
import shutil
import socket
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch

from gbcli.data import sources as data
from gbcli.errors import GbError

MNIST_FILES = [f"{base}.gz" for base in data.CHECKSUMS["mnist"]]
FASHION_DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")  # Debian package dataset-fashion-mnist


# ----------------------------------------------------------------------------- helpers


@pytest.fixture(scope="session")
def mnist_dir(shared_data_dir) -> Path:
    return shared_data_dir / "mnist"


@pytest.fixture(scope="session")
def mnist(shared_data_dir) -> data.Dataset:
    return data.load_dataset("mnist", train_size=1000, val_size=500, data_seed=3, data_dir=shared_data_dir)


@pytest.fixture(scope="session")
def mirror_dir(mnist_dir, tmp_path_factory) -> Path:
    """A temporary copy of the four MNIST .gz files, to serve over HTTP or copy around."""
    folder = tmp_path_factory.mktemp("mirror")
    for name in MNIST_FILES:
        shutil.copyfile(mnist_dir / name, folder / name)
    return folder


def _copy_mnist(src: Path, root: Path) -> Path:
    """Copy the .gz files into <root>/mnist/ and return root (a private data dir)."""
    (root / "mnist").mkdir(parents=True)
    for name in MNIST_FILES:
        shutil.copyfile(src / name, root / "mnist" / name)
    return root


def _write_corrupt(src: Path, dst: Path) -> None:
    """A valid gzip of `src` whose content has its last byte changed (wrong md5, intact IDX)."""
    content = bytearray(gzip.decompress(src.read_bytes()))
    content[-1] = (content[-1] + 1) % 10
    dst.write_bytes(gzip.compress(bytes(content), compresslevel=1))


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def _serve(directory: Path):
    """Serve `directory` over HTTP on 127.0.0.1 (a free port) and yield its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _dead_url() -> str:
    """A localhost URL whose port was just bound and closed, so connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


def _all_ok(statuses: dict[str, str]) -> bool:
    return len(statuses) == 4 and set(statuses.values()) == {"ok"}


# ----------------------------------------------------------------------------- data dir


def test_data_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("GB_DATA_DIR", raising=False)
    assert data.data_dir() == data.DEFAULT_DATA_DIR == Path.home() / ".cache" / "gb" / "data"
    monkeypatch.setenv("GB_DATA_DIR", str(tmp_path / "env"))
    assert data.data_dir() == tmp_path / "env"
    assert data.data_dir(tmp_path / "arg") == tmp_path / "arg"


# ----------------------------------------------------------------------------- MNIST


@pytest.mark.slow
def test_mnist_shapes_and_range(mnist):
    assert mnist.name == "mnist"
    assert mnist.x_train.shape == (1000, 785) and mnist.x_val.shape == (500, 785)
    assert mnist.x_pool.shape == (60000, 785) and mnist.dim == 785
    for x in (mnist.x_train, mnist.x_val, mnist.x_pool):
        assert x.dtype == np.float64
        assert x.min() >= -1.0 and x.max() <= 1.0
        assert np.all(x[:, -1] == 1.0)
    assert mnist.x_train[:, :-1].min() == -1.0 and mnist.x_train[:, :-1].max() == 1.0
    for y in (mnist.y_train, mnist.y_val):
        assert y.dtype == np.float64 and set(np.unique(y)) == {-1.0, 1.0}
    assert mnist.train_idx.dtype == np.int64 and mnist.val_idx.dtype == np.int64


def test_mnist_pixels_and_labels_follow_raw_files(mnist, shared_data_dir):
    images, labels = data.load_idx("mnist", "train", shared_data_dir)
    assert images.shape == (60000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (60000,) and labels.dtype == np.uint8
    expected_x = (images[mnist.train_idx].reshape(-1, 784) / 255.0 - 0.5) / 0.5
    np.testing.assert_array_equal(mnist.x_train[:, :784], expected_x)
    np.testing.assert_array_equal(mnist.x_pool[mnist.val_idx], mnist.x_val)
    np.testing.assert_array_equal(mnist.y_train, np.where(labels[mnist.train_idx] <= 4, 1.0, -1.0))
    np.testing.assert_array_equal(mnist.y_val, np.where(labels[mnist.val_idx] <= 4, 1.0, -1.0))


def test_mnist_test_split(shared_data_dir):
    images, labels = data.load_idx("mnist", "test", shared_data_dir)
    assert images.shape == (10000, 28, 28) and labels.shape == (10000,)


def test_positive_classes(shared_data_dir):
    ds = data.load_dataset("mnist", train_size=300, val_size=100, data_dir=shared_data_dir, positive_classes=[3, 8])
    _, labels = data.load_idx("mnist", "train", shared_data_dir)
    np.testing.assert_array_equal(ds.y_train, np.where(np.isin(labels[ds.train_idx], [3, 8]), 1.0, -1.0))


def test_split_equals_torch_random_split(mnist):
    parts = torch.utils.data.random_split(
        range(60000), [1000, 60000 - 1500, 500], generator=torch.Generator().manual_seed(3)
    )
    assert mnist.train_idx.tolist() == list(parts[0].indices)
    assert mnist.val_idx.tolist() == list(parts[2].indices)
    assert not set(mnist.train_idx.tolist()) & set(mnist.val_idx.tolist())


def test_split_depends_on_data_seed_only(shared_data_dir, mnist):
    again = data.load_dataset("mnist", train_size=1000, val_size=500, data_seed=3, data_dir=shared_data_dir)
    np.testing.assert_array_equal(again.train_idx, mnist.train_idx)
    other = data.load_dataset("mnist", train_size=1000, val_size=500, data_seed=4, data_dir=shared_data_dir)
    assert not np.array_equal(other.train_idx, mnist.train_idx)


def test_pool_is_read_only_and_rows_are_copies(mnist):
    assert not mnist.x_pool.flags.writeable
    # the split's rows are copies of the pool's, read-only too (a worker shares them between points)
    assert not mnist.x_train.flags.writeable and not np.shares_memory(mnist.x_train, mnist.x_pool)


def test_a_split_is_kept_read_only_and_shared(mnist, shared_data_dir):
    """A sweep worker loads the same split for every point: the second load returns the same
    read-only arrays (no copy, and nothing can change them under gating's caches); another split
    gets its own."""
    kw = dict(train_size=100, val_size=50, data_dir=shared_data_dir)
    a, b = data.load_dataset("mnist", **kw), data.load_dataset("mnist", **kw)
    assert a.x_train is b.x_train and a.x_val is b.x_val
    assert not a.x_train.flags.writeable and not a.y_val.flags.writeable
    c = data.load_dataset("mnist", **{**kw, "data_seed": 2})
    assert c.x_train is not a.x_train and not np.array_equal(c.train_idx, a.train_idx)


def test_corrupt_copy_is_refused(tmp_path, mirror_dir):
    root = _copy_mnist(mirror_dir, tmp_path)
    _write_corrupt(mirror_dir / "train-labels-idx1-ubyte.gz", root / "mnist" / "train-labels-idx1-ubyte.gz")
    before = sorted(p.name for p in (root / "mnist").iterdir())
    with pytest.raises(GbError, match=r"train-labels-idx1-ubyte\.gz is corrupt") as err:
        data.load_dataset("mnist", train_size=10, val_size=10, data_dir=root)
    assert "\n" not in str(err.value)
    assert data.verify("mnist", root) == {
        "train-images-idx3-ubyte": "ok",
        "train-labels-idx1-ubyte": "checksum mismatch",
        "t10k-images-idx3-ubyte": "ok",
        "t10k-labels-idx1-ubyte": "ok",
    }
    assert sorted(p.name for p in (root / "mnist").iterdir()) == before  # loading writes nothing


def test_non_gzip_file_is_refused(tmp_path, mirror_dir):
    root = _copy_mnist(mirror_dir, tmp_path)
    (root / "mnist" / "t10k-images-idx3-ubyte.gz").write_bytes(b"<html>not found</html>")
    with pytest.raises(GbError, match=r"t10k-images-idx3-ubyte\.gz is corrupt"):
        data.load_idx("mnist", "test", root)
    assert data.verify("mnist", root)["t10k-images-idx3-ubyte"] == "checksum mismatch"


def test_uncompressed_files_are_accepted(tmp_path, mirror_dir, shared_data_dir):
    (tmp_path / "mnist").mkdir()
    for base in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        raw = gzip.decompress((mirror_dir / f"{base}.gz").read_bytes())
        (tmp_path / "mnist" / base).write_bytes(raw)
    images, labels = data.load_idx("mnist", "test", tmp_path)
    ref_images, ref_labels = data.load_idx("mnist", "test", shared_data_dir)
    np.testing.assert_array_equal(images, ref_images)
    np.testing.assert_array_equal(labels, ref_labels)
    status = data.verify("mnist", tmp_path)
    assert status["t10k-images-idx3-ubyte"] == "ok" and status["train-images-idx3-ubyte"] == "missing"


@pytest.mark.parametrize(
    "blob, message",
    [
        (b"\x00\x01\x08\x01" + (3).to_bytes(4, "big") + b"abc", "bad magic number"),
        (b"\x00\x00\x0d\x01" + (3).to_bytes(4, "big") + b"abc", "not unsigned byte"),
        (b"\x00\x00\x08\x03" + (3).to_bytes(4, "big"), "truncated IDX header"),
        (b"\x00\x00\x08\x01" + (5).to_bytes(4, "big") + b"abc", r"shape \(5,\)"),
    ],
)
def test_malformed_idx_is_refused(blob, message):
    with pytest.raises(GbError, match=message):
        data._parse_idx(blob, "some-file")
    good = data._parse_idx(b"\x00\x00\x08\x02" + (2).to_bytes(4, "big") + (3).to_bytes(4, "big") + bytes(range(6)), "f")
    np.testing.assert_array_equal(good, [[0, 1, 2], [3, 4, 5]])


def test_missing_files_give_a_hint(tmp_path):
    with pytest.raises(GbError) as err:
        data.load_dataset("mnist", train_size=10, val_size=10, data_dir=tmp_path / "nowhere")
    message = str(err.value)
    assert str(tmp_path / "nowhere" / "mnist" / "train-images-idx3-ubyte.gz") in message
    assert "gb data fetch mnist" in message and "GB_DATA_DIR" in message and "\n" not in message
    assert not (tmp_path / "nowhere").exists()
    assert set(data.verify("mnist", tmp_path / "nowhere").values()) == {"missing"}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(train_size=0, val_size=10), "dataset.train_size"),
        (dict(train_size=10, val_size=0), "dataset.val_size"),
        (dict(train_size=10.5, val_size=10), "dataset.train_size: input should be a valid integer"),
        (
            dict(train_size=70000, val_size=5000),
            r"dataset.train_size \+ dataset.val_size = 75000 exceeds the 60000 images of mnist",
        ),
        (dict(train_size=10, val_size=10, positive_classes=[]), "dataset.positive_classes"),
        (dict(train_size=10, val_size=10, positive_classes=range(10)), "dataset.positive_classes"),
        (dict(train_size=10, val_size=10, positive_classes=[1, 10]), "dataset.positive_classes"),
        (dict(train_size=10, val_size=10, positive_classes="01"), "dataset.positive_classes"),
        (dict(train_size=10, val_size=10, data_seed=-1), "dataset.data_seed"),
    ],
)
def test_bad_settings_name_the_key(shared_data_dir, kwargs, message):
    with pytest.raises(GbError, match=message):
        data.load_dataset("mnist", data_dir=shared_data_dir, **kwargs)


def test_unknown_name_lists_datasets():
    with pytest.raises(GbError, match="dataset.name 'cifar10'") as err:
        data.load_dataset("cifar10", train_size=10, val_size=10)
    assert all(name in str(err.value) for name in data.DATASETS)
    with pytest.raises(GbError, match="dataset.name"):
        data.verify("cifar10")


# ----------------------------------------------------------------------------- Fashion-MNIST


@pytest.mark.slow
def test_fashion_mnist_from_debian_package(tmp_path):
    if not all((FASHION_DEBIAN_DIR / f).is_file() for f in MNIST_FILES):
        pytest.skip(f"Fashion-MNIST not in {FASHION_DEBIAN_DIR}: apt-get install dataset-fashion-mnist")
    (tmp_path / "fashion-mnist").mkdir()
    for name in MNIST_FILES:
        (tmp_path / "fashion-mnist" / name).symlink_to(FASHION_DEBIAN_DIR / name)
    assert _all_ok(data.verify("fashion-mnist", tmp_path))
    ds = data.load_dataset("fashion-mnist", train_size=200, val_size=100, data_dir=tmp_path)
    assert ds.x_train.shape == (200, 785) and ds.x_pool.shape == (60000, 785)
    assert ds.x_pool.min() == -1.0 and ds.x_pool.max() == 1.0 and np.all(ds.x_pool[:, -1] == 1.0)
    _, labels = data.load_idx("fashion-mnist", "train", tmp_path)
    np.testing.assert_array_equal(ds.y_val, np.where(labels[ds.val_idx] <= 4, 1.0, -1.0))


# ----------------------------------------------------------------------------- digits


def test_digits_shapes_labels_and_determinism():
    from sklearn.datasets import load_digits

    ds = data.load_dataset("digits", train_size=1000, val_size=300, data_seed=7)
    assert ds.x_train.shape == (1000, 65) and ds.x_val.shape == (300, 65) and ds.x_pool.shape == (1797, 65)
    assert ds.dim == 65 and np.all(ds.x_pool[:, -1] == 1.0)
    assert ds.x_pool.min() == -1.0 and ds.x_pool.max() == 1.0
    digits = load_digits()   # gb reads the package's file itself: the same pixels and labels
    target = digits.target
    np.testing.assert_array_equal(ds.x_pool[:, :-1], (digits.data / 16.0 - 0.5) / 0.5)
    np.testing.assert_array_equal(ds.y_train, np.where(target[ds.train_idx] <= 4, 1.0, -1.0))
    parts = torch.utils.data.random_split(range(1797), [1000, 497, 300], generator=torch.Generator().manual_seed(7))
    assert ds.train_idx.tolist() == list(parts[0].indices) and ds.val_idx.tolist() == list(parts[2].indices)
    again = data.load_dataset("digits", train_size=1000, val_size=300, data_seed=7)
    np.testing.assert_array_equal(again.x_train, ds.x_train)
    np.testing.assert_array_equal(again.y_val, ds.y_val)
    with pytest.raises(GbError, match="exceeds the 1797 images of digits"):
        data.load_dataset("digits", train_size=1500, val_size=300)


# ----------------------------------------------------------------------------- synthetic sets


def _all_points(ds: data.Dataset) -> tuple[np.ndarray, np.ndarray]:
    return np.vstack([ds.x_train, ds.x_val]), np.concatenate([ds.y_train, ds.y_val])


def test_linear_teacher_is_separable():
    from scipy.optimize import linprog

    ds = data.load_dataset("linear-teacher", train_size=300, val_size=200, n_samples=500, dim=20, synthetic_seed=2)
    assert ds.x_train.shape == (300, 20) and ds.x_pool.shape == (500, 20)
    x, y = _all_points(ds)
    assert set(np.unique(y)) == {-1.0, 1.0}
    # Hard-margin feasibility: some w has y_i <w, x_i> >= 1 for every point.
    fit = linprog(np.zeros(20), A_ub=-(y[:, None] * x), b_ub=-np.ones(len(y)), bounds=(None, None))
    assert fit.status == 0
    # And the teacher itself separates with the requested margin.
    pool, labels, w = data._linear_teacher(500, 20, 2, 0.5)
    assert abs(np.linalg.norm(w) - 1.0) < 1e-12
    assert np.all(labels * (pool @ w) >= 0.5)


def test_linear_teacher_margin_and_determinism():
    kwargs = dict(train_size=50, val_size=50, n_samples=200, dim=5, synthetic_seed=1, margin=0.3)
    a, b = data.load_dataset("linear-teacher", **kwargs), data.load_dataset("linear-teacher", **kwargs)
    np.testing.assert_array_equal(a.x_pool, b.x_pool)
    c = data.load_dataset("linear-teacher", **{**kwargs, "synthetic_seed": 2})
    assert not np.array_equal(a.x_pool, c.x_pool)
    with pytest.raises(GbError, match="dataset.margin"):
        data.load_dataset("linear-teacher", **{**kwargs, "margin": 10.0})
    with pytest.raises(GbError, match="dataset.margin"):
        data.load_dataset("linear-teacher", **{**kwargs, "margin": -1.0})


def test_orthogonal_is_orthogonally_separable():
    ds = data.load_dataset("orthogonal", train_size=200, val_size=100, n_samples=400, dim=10, synthetic_seed=5)
    x, y = _all_points(ds)
    gram = x @ x.T
    same = y[:, None] == y[None, :]
    assert np.all(gram[same] > 0) and np.all(gram[~same] <= 0)
    z = np.where(np.arange(10) % 2 == 0, 1.0, -1.0)
    assert np.all(x @ z >= 0)
    assert set(np.unique(y)) == {-1.0, 1.0}


def test_synthetic_bias_and_split():
    ds = data.load_dataset("orthogonal", train_size=30, val_size=20, n_samples=100, dim=4, bias=True, data_seed=9)
    assert ds.dim == 5 and np.all(ds.x_pool[:, -1] == 1.0)
    parts = torch.utils.data.random_split(range(100), [30, 50, 20], generator=torch.Generator().manual_seed(9))
    assert ds.train_idx.tolist() == list(parts[0].indices) and ds.val_idx.tolist() == list(parts[2].indices)
    with pytest.raises(GbError, match="exceeds the 100 samples of orthogonal"):
        data.load_dataset("orthogonal", train_size=90, val_size=20, n_samples=100)
    with pytest.raises(GbError, match="dataset.dim"):
        data.load_dataset("orthogonal", train_size=1, val_size=1, dim=0)


# ----------------------------------------------------------------------------- fetch


@pytest.mark.slow
def test_fetch_from_local_mirror(tmp_path, mirror_dir, capsys):
    with _serve(mirror_dir) as url:
        folder = data.fetch("mnist", data_dir=tmp_path, mirrors=[url], progress=True)
    assert folder == tmp_path.resolve() / "mnist"
    assert sorted(p.name for p in folder.iterdir()) == sorted(MNIST_FILES)  # no temp files left
    assert _all_ok(data.verify("mnist", tmp_path))
    assert "mnist/train-images-idx3-ubyte.gz" in capsys.readouterr().err
    # Everything is present and valid now: a second fetch downloads nothing, dead mirror or not.
    data.fetch("mnist", data_dir=tmp_path, mirrors=[_dead_url()], progress=False)
    ds = data.load_dataset("mnist", train_size=20, val_size=10, data_dir=tmp_path)
    assert ds.x_train.shape == (20, 785)


@pytest.mark.slow
def test_fetch_skips_to_next_mirror_after_bad_copy(tmp_path, mirror_dir):
    bad = tmp_path / "bad-mirror"
    bad.mkdir()
    _write_corrupt(mirror_dir / "train-labels-idx1-ubyte.gz", bad / "train-labels-idx1-ubyte.gz")
    (bad / "t10k-labels-idx1-ubyte.gz").write_bytes(b"not gzip")
    root = tmp_path / "data"
    with _serve(bad) as bad_url, _serve(mirror_dir) as good_url:
        data.fetch("mnist", data_dir=root, mirrors=[_dead_url(), bad_url, good_url], progress=False)
    assert _all_ok(data.verify("mnist", root))
    good = (mirror_dir / "train-labels-idx1-ubyte.gz").read_bytes()
    assert (root / "mnist" / "train-labels-idx1-ubyte.gz").read_bytes() == good


def test_fetch_replaces_corrupt_file_and_uses_gb_mirrors(tmp_path, mirror_dir, monkeypatch):
    root = _copy_mnist(mirror_dir, tmp_path / "data")
    _write_corrupt(mirror_dir / "t10k-labels-idx1-ubyte.gz", root / "mnist" / "t10k-labels-idx1-ubyte.gz")
    with _serve(mirror_dir) as url:
        monkeypatch.setenv("GB_MIRRORS", f" {_dead_url()} ,{url}")
        data.fetch("mnist", data_dir=root, progress=False)
    assert _all_ok(data.verify("mnist", root))


@pytest.mark.slow
def test_fetch_without_working_mirror_fails(tmp_path, mirror_dir):
    dead = _dead_url()
    with pytest.raises(GbError) as err:
        data.fetch("mnist", data_dir=tmp_path, mirrors=[dead], progress=False)
    message = str(err.value)
    assert message.startswith("could not download mnist/train-images-idx3-ubyte.gz from any mirror (")
    assert dead in message and f"copy the files into {tmp_path.resolve() / 'mnist'} by hand" in message
    assert "\n" not in message
    assert not (tmp_path / "mnist").exists() or not any((tmp_path / "mnist").iterdir())
    # A mirror that only has corrupt copies is no better.
    bad = tmp_path / "bad-mirror"
    bad.mkdir()
    _write_corrupt(mirror_dir / "train-images-idx3-ubyte.gz", bad / "train-images-idx3-ubyte.gz")
    with _serve(bad) as url, pytest.raises(GbError, match="checksum mismatch"):
        data.fetch("mnist", data_dir=tmp_path / "d2", mirrors=[url], progress=False)
    assert not (tmp_path / "d2" / "mnist" / "train-images-idx3-ubyte.gz").exists()


def test_sets_without_files_need_no_fetch(tmp_path):
    for name in ("digits", "linear-teacher", "orthogonal"):
        data.fetch(name, data_dir=tmp_path, mirrors=[_dead_url()], progress=False)
        assert data.verify(name, tmp_path) == {}
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- bounded reading


def _write_bomb(path: Path, nbytes: int) -> None:
    """A gzip file of `nbytes` zeros, written in 1 MB chunks (never held in memory)."""
    zeros = bytes(1 << 20)
    with gzip.open(path, "wb", compresslevel=1) as f:
        for _ in range(nbytes // len(zeros)):
            f.write(zeros)


class _CountingReader:
    def __init__(self, f) -> None:
        self.f, self.read_bytes = f, 0

    def read(self, n: int = -1) -> bytes:
        chunk = self.f.read(n)
        self.read_bytes += len(chunk)
        return chunk


def test_expected_sizes_match_the_real_files(mnist_dir):
    assert data.SIZES == {"train-images-idx3-ubyte": 47_040_016, "train-labels-idx1-ubyte": 60_008,
                          "t10k-images-idx3-ubyte": 7_840_016, "t10k-labels-idx1-ubyte": 10_008}
    for base, size in data.SIZES.items():
        assert len(gzip.decompress((mnist_dir / f"{base}.gz").read_bytes())) == size


def test_a_gzip_bomb_stops_at_the_expected_size(tmp_path, mirror_dir):
    import tracemalloc

    root = _copy_mnist(mirror_dir, tmp_path)
    bomb = root / "mnist" / "train-labels-idx1-ubyte.gz"
    _write_bomb(bomb, 512 * 1024 ** 2)   # 512 MB of zeros in ~2 MB
    tracemalloc.start()
    try:
        status = data.verify("mnist", root)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status["train-labels-idx1-ubyte"] == "corrupt (more than the 60,008 bytes of this file)"
    assert status["train-images-idx3-ubyte"] == "ok"
    assert peak < 12 * 1024 ** 2   # verifying hashes pieces: not even a whole good file is held
    with bomb.open("rb") as f:   # reading stops within one chunk of the point the output is too large
        reader = _CountingReader(f)
        assert data._gunzip_bounded(reader, 60_008, keep=True)[2] == "more than the 60,008 bytes of this file"
    assert reader.read_bytes <= data.CHUNK
    with pytest.raises(GbError, match=r"train-labels-idx1-ubyte\.gz is corrupt \(more than the 60,008 bytes") as err:
        data.load_dataset("mnist", train_size=10, val_size=10, data_dir=root)
    assert "\n" not in str(err.value) and "gb data fetch mnist" in str(err.value)


def test_truncated_and_oversized_files_are_corrupt(tmp_path, mirror_dir):
    root = _copy_mnist(mirror_dir, tmp_path)
    folder = root / "mnist"
    labels = (mirror_dir / "t10k-labels-idx1-ubyte.gz").read_bytes()
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(labels[: len(labels) // 2])   # a cut download
    images = gzip.decompress((mirror_dir / "t10k-images-idx3-ubyte.gz").read_bytes())
    (folder / "t10k-images-idx3-ubyte.gz").unlink()
    (folder / "t10k-images-idx3-ubyte").write_bytes(images + b"\0")   # uncompressed, one byte too many
    status = data.verify("mnist", root)
    assert status["t10k-labels-idx1-ubyte"].startswith("corrupt (truncated: ")
    assert status["t10k-labels-idx1-ubyte"].endswith(" of 10,008 bytes)")
    assert status["t10k-images-idx3-ubyte"] == "corrupt (more than the 7,840,016 bytes of this file)"
    with pytest.raises(GbError, match=r"t10k-images-idx3-ubyte is corrupt \(more than the 7,840,016 bytes"):
        data.load_idx("mnist", "test", root)
    (folder / "t10k-images-idx3-ubyte").write_bytes(images)
    with pytest.raises(GbError, match=r"t10k-labels-idx1-ubyte\.gz is corrupt \(truncated"):
        data.load_idx("mnist", "test", root)
    (folder / "t10k-images-idx3-ubyte").write_bytes(images[:-1])
    assert data.verify("mnist", root)["t10k-images-idx3-ubyte"] == "corrupt (truncated: 7,840,015 of 7,840,016 bytes)"
    (folder / "t10k-images-idx3-ubyte").write_bytes(b"")
    assert data.verify("mnist", root)["t10k-images-idx3-ubyte"] == "corrupt (truncated: 0 of 7,840,016 bytes)"


@pytest.mark.slow
def test_multi_member_gzip_and_zero_padding_are_accepted(tmp_path, mirror_dir, shared_data_dir):
    """What gzip.decompress (and gunzip) accept, the bounded reader accepts too."""
    root = _copy_mnist(mirror_dir, tmp_path)
    folder = root / "mnist"
    images = gzip.decompress((mirror_dir / "t10k-images-idx3-ubyte.gz").read_bytes())
    half = len(images) // 2
    (folder / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(images[:half]) + gzip.compress(images[half:]))
    labels = (mirror_dir / "t10k-labels-idx1-ubyte.gz").read_bytes()
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(labels + bytes(3000))
    assert _all_ok(data.verify("mnist", root))
    got, ref = data.load_idx("mnist", "test", root), data.load_idx("mnist", "test", shared_data_dir)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])
    assert not got[0].flags.writeable and not got[1].flags.writeable
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(labels + b"garbage")
    assert data.verify("mnist", root)["t10k-labels-idx1-ubyte"] == "checksum mismatch"


def test_fetch_refuses_a_gzip_bomb_from_a_mirror(tmp_path, mirror_dir):
    bad = tmp_path / "bomb-mirror"
    bad.mkdir()
    for name in MNIST_FILES:
        shutil.copyfile(mirror_dir / name, bad / name)
    _write_bomb(bad / "train-labels-idx1-ubyte.gz", 256 * 1024 ** 2)
    with _serve(bad) as url, pytest.raises(GbError, match=r"train-labels-idx1-ubyte\.gz from any mirror") as err:
        data.fetch("mnist", data_dir=tmp_path / "d", mirrors=[url], progress=False)
    assert "larger than the file can be" in str(err.value) or "more than the 60,008 bytes" in str(err.value)
    assert not (tmp_path / "d" / "mnist" / "train-labels-idx1-ubyte.gz").exists()


def test_a_long_value_is_shortened_in_messages():
    from gbcli.text import quoted, shorten

    assert shorten("abc") == "abc" and quoted("abc") == "'abc'"
    text = shorten("a" * 150 + "b" * 1_000_000 + "c" * 50)
    assert len(text) <= 200 and text.startswith("a" * 100) and "...bbb" in text and text.endswith("(1,000,200 characters)")
    for call in (lambda: data.load_dataset("x" * 1_000_000, train_size=1, val_size=1),
                 lambda: data.load_dataset("digits", train_size=1, val_size=1, positive_classes=list(range(10)) * 10**5),
                 lambda: data.load_dataset("digits", train_size="1" * 10**6, val_size=1)):
        with pytest.raises(GbError) as err:
            call()
        assert len(str(err.value)) < 400 and "..." in str(err.value)


@pytest.mark.parametrize("train_size, val_size", [(100, 200), (300, None)])
def test_the_memory_estimate_of_a_dataset_is_what_it_loads(train_size, val_size):
    """pool_bytes (the memory check before any training) is the bytes of the pool and the two splits
    as loaded: an estimate off by a factor would let a too-large run start or refuse a small one."""
    from gbcli.config import validate

    cfg = validate({"dataset": {"name": "digits", "train_size": train_size,
                                **({} if val_size is None else {"val_size": val_size})}}, "test")
    ds = cfg.dataset.load()
    assert cfg.dataset.pool_bytes() == ds.x_pool.nbytes + ds.x_train.nbytes + ds.x_val.nbytes


def _digits(**extra):
    from gbcli.config import validate

    return validate({"dataset": {"name": "digits", "train_size": 100, "val_size": 200, **extra}}, "test")


def test_max_norm_rescales_every_split_by_one_constant():
    plain, scaled = _digits().dataset.load(), _digits(max_norm=0.5).dataset.load()
    assert np.linalg.norm(scaled.x_pool, axis=1).max() == pytest.approx(0.5, rel=1e-12)
    s = 0.5 / np.linalg.norm(plain.x_pool, axis=1).max()
    for a, b in ((plain.x_pool, scaled.x_pool), (plain.x_train, scaled.x_train), (plain.x_val, scaled.x_val)):
        np.testing.assert_allclose(b, a * s, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(plain.y_train, scaled.y_train)


@pytest.mark.parametrize("low, high", [(0.0, 1.0), (-2.0, 3.0)])
def test_pixel_range_maps_pixels_affinely_and_keeps_the_constant(low, high):
    plain, mapped = _digits().dataset.load(), _digits(pixel_range=[low, high]).dataset.load()
    for a, b in ((plain.x_pool, mapped.x_pool), (plain.x_train, mapped.x_train), (plain.x_val, mapped.x_val)):
        np.testing.assert_allclose(b[:, :-1], low + (high - low) * (a[:, :-1] + 1) / 2, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(b[:, -1], a[:, -1])   # the constant 1 feature
    assert mapped.x_pool[:, :-1].min() == pytest.approx(low) and mapped.x_pool[:, :-1].max() == pytest.approx(high)


@pytest.mark.parametrize("extra, says", [
    ({"pixel_range": [1.0, 0.0]}, "dataset.pixel_range"), ({"pixel_range": [0.5, 0.5]}, "dataset.pixel_range"),
    ({"pixel_range": [0.0, 1.0, 2.0]}, "dataset.pixel_range"), ({"max_norm": float("inf")}, "max_norm"),
    ({"classes": [3]}, "dataset.classes"), ({"classes": [3, 3]}, "dataset.classes"),
    ({"classes": [3, 10]}, "dataset.classes"), ({"classes": [1, 2]}, "dataset.classes"),
    ({"classes": [0, 1, 2, 3, 4]}, "must have both positive and negative classes"),
])
def test_impossible_image_settings_are_refused(extra, says):
    from gbcli.errors import GbError

    with pytest.raises(GbError, match=says):
        _digits(**extra)


@pytest.mark.parametrize("classes", [[3, 5], [0, 9], list(range(10))])
def test_a_digit_pair_is_a_dataset(classes):
    ds = _digits(classes=classes, val_size=100).dataset.load()
    assert set(np.unique(ds.y_train)) == {-1.0, 1.0}


def _synthetic(**dataset):
    from gbcli.config import validate

    return validate({"dataset": dataset}, "test").dataset


def test_symmetric_gaussians_are_the_distribution_they_say():
    """Paper 002's classes: y = +-1 with probability 1/2, x ~ N(y mean_norm e, std^2 I), kept when
    y <e, x> > margin. Measured on 6,000 points (4 sigma of truncation: the moments are the plain ones)."""
    spec = _synthetic(name="symmetric-gaussians", n_samples=6000, dim=5, mean_norm=3.0, std=0.5, margin=1.0,
                      train_size=3000, val_size=3000, synthetic_seed=4)
    ds = spec.load()
    x = np.concatenate([ds.x_train, ds.x_val])
    y = np.concatenate([ds.y_train, ds.y_val])
    assert x.shape == (6000, 5) and spec.feature_dim() == 5 and set(np.unique(y)) == {-1.0, 1.0}
    assert abs(y.mean()) < 0.05                                     # balanced labels
    mean = (y[:, None] * x).mean(0)
    assert np.linalg.norm(mean) == pytest.approx(3.0, abs=0.03)    # |class mean| = mean_norm
    e = mean / np.linalg.norm(mean)
    resid = x - y[:, None] * 3.0 * e
    assert resid.std(0) == pytest.approx(np.full(5, 0.5), abs=0.02)   # every coordinate's std
    assert (y * (x @ e)).min() > 1.0 - 0.05                         # nothing kept within the margin
    assert not ds.x_pool.flags.writeable                            # the pool is shared, never changed in place


@pytest.mark.parametrize("dataset, says", [
    ({"name": "symmetric-gaussians", "mean_norm": 0.0, "std": 1.0, "margin": 4.0}, "keeps fewer than 1 in 1000"),
    ({"name": "symmetric-gaussians", "mean_norm": float("inf")}, "mean_norm"),
    ({"name": "symmetric-gaussians", "std": float("inf")}, "std"),
    ({"name": "symmetric-gaussians", "margin": float("inf")}, "dataset.margin: input should be a finite number"),
    ({"name": "symmetric-gaussians", "mean_norm": 0.0, "std": 1.0, "margin": 3.19}, "keeps fewer than 1 in 1000"),
    ({"name": "linear-teacher", "margin": float("inf")}, "margin"),
    ({"name": "points", "x": [[1.0, 2.0], [1.0]], "y": [1, -1]}, "every point needs the same"),
])
def test_impossible_synthetic_settings_are_refused(dataset, says):
    from gbcli.errors import GbError

    with pytest.raises(GbError, match=says):
        _synthetic(**dataset)


def test_a_rare_but_reachable_margin_is_accepted_and_a_bias_is_a_feature():
    spec = _synthetic(name="symmetric-gaussians", mean_norm=0.0, std=1.0, margin=2.5)   # 0.6% of draws kept
    assert spec.margin == 2.5
    spec = _synthetic(name="linear-teacher", n_samples=200, dim=4, bias=True, train_size=100, val_size=100)
    ds = spec.load()
    assert spec.feature_dim() == 5 == ds.x_train.shape[1] and np.all(ds.x_train[:, -1] == 1.0)


def test_splits_larger_than_the_generated_set_are_refused():
    from gbcli.errors import GbError

    spec = _synthetic(name="symmetric-gaussians", n_samples=100, dim=2, train_size=60, val_size=41)
    with pytest.raises(GbError, match="exceeds dataset.n_samples = 100"):
        spec.load()
