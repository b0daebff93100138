"""Work is bounded before it starts: a gzip bomb in the data directory, a 1 MB value in a config,
a config "file" that is /dev/zero or a FIFO. Each is refused with exit code 2 and exactly one
stderr line `gb: error: ...` (naming the key or the file, at most a few hundred characters), no
traceback, no MemoryError, no hang, and nothing written.

Every case runs the real CLI in its own process and working directory, forked from a process that
has imported gb (tests/forked_gb.py). The gzip bomb (3 GiB of zeros, ~14 MB compressed, written in
chunks) is read under an address-space limit that the whole file could never fit in.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

import forked_gb

GB = (sys.executable, "-c", "from gbcli.cli import main; main()")
TIMEOUT = 600            # a hang guard only: a loaded machine makes the torch import alone take a minute
MEMORY = 3 * 1024 ** 3   # bytes of address space (torch imports in ~1 GB; the bomb inflates to 3 GiB)
BOMB_BYTES = 3 * 1024 ** 3
MAX_LINE = 500
MB = 1_000_000
ARG_MAX = 120_000        # Linux refuses a single argument over 128 KiB: the largest --set we can pass
MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte")
TINY = {"dataset": {"name": "digits", "train_size": 50, "val_size": 50}, "training": {"epochs": 1},
        "model": {"kind": "gln", "hidden_units": 2}}
MNIST = {"dataset": {"name": "mnist", "train_size": 100, "val_size": 100}, "training": {"epochs": 1},
         "model": {"kind": "gln", "hidden_units": 2}}


# ----------------------------------------------------------------------------- helpers


def _env(data_dir: Path) -> dict:
    return {**os.environ, "GB_DATA_DIR": str(data_dir), "COLUMNS": "60", "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run_gb(args, work: Path, data_dir: Path, memory: bool = True) -> subprocess.CompletedProcess:
    try:
        # a real process forked from one that has imported gb (tests/forked_gb.py)
        return forked_gb.run(args, work, _env(data_dir), timeout=TIMEOUT, memory=MEMORY if memory else None)
    except subprocess.TimeoutExpired:
        pytest.fail(f"gb {' '.join(map(str, args))[:200]}: timed out after {TIMEOUT} s (a hang)")


def _tree(root: Path) -> dict[str, tuple]:
    """Every path under `root` with its mode, mtime and size (what "nothing written" compares)."""
    return {str(p.relative_to(root)): (p.lstat().st_mode, p.lstat().st_mtime_ns, p.lstat().st_size)
            for p in sorted(root.rglob("*"))}


def _check_error_line(p: subprocess.CompletedProcess, *expect: str) -> str:
    what = f"--- exit {p.returncode}\n--- stderr\n{p.stderr[:2000]}\n--- stdout\n{p.stdout[-2000:]}"
    assert "Traceback" not in p.stderr + p.stdout, what
    assert "MemoryError" not in p.stderr + p.stdout, what
    assert p.returncode == 2, what
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1, f"not exactly one stderr line\n{what}"
    assert err.startswith("gb: error: "), what
    assert len(err) < MAX_LINE, f"{len(err)} characters\n{what}"
    for part in expect:
        assert part in err, f"{part!r} not in the message\n{what}"
    return err


def _refused(work: Path, data_dir: Path, args, *expect: str) -> str:
    """Run `gb args` in `work`; check the one-line refusal and that nothing was written there."""
    before = _tree(work)
    err = _check_error_line(run_gb(args, work, data_dir), *expect)
    assert _tree(work) == before, "files were written"
    return err


def _write_config(work: Path, cfg: dict, name: str = "cfg.yaml") -> Path:
    path = work / name
    path.write_text(yaml.safe_dump(cfg, sort_keys=False, width=1 << 30))
    return path


@pytest.fixture
def work(tmp_path) -> Path:
    w = tmp_path / "work"
    w.mkdir()
    return w


@pytest.fixture(scope="module")
def bomb_dir(shared_data_dir, tmp_path_factory) -> Path:
    """A data dir whose mnist/train-images file is a gzip bomb; the other three are the real files."""
    root = tmp_path_factory.mktemp("bomb-data")
    (root / "mnist").mkdir()
    for base in MNIST_FILES[1:]:
        (root / "mnist" / f"{base}.gz").symlink_to(Path(shared_data_dir).resolve() / "mnist" / f"{base}.gz")
    zeros = bytes(1 << 20)
    with gzip.open(root / "mnist" / f"{MNIST_FILES[0]}.gz", "wb", compresslevel=1) as f:
        for _ in range(BOMB_BYTES // len(zeros)):
            f.write(zeros)
    assert (root / "mnist" / f"{MNIST_FILES[0]}.gz").stat().st_size < 20 * MB
    return root


# ----------------------------------------------------------------------------- gzip bombs


@pytest.mark.slow
def test_verify_refuses_a_gzip_bomb(bomb_dir, work):
    p = run_gb(["data", "verify", "mnist", "--data-dir", bomb_dir], work, bomb_dir)
    err = _check_error_line(p, "mnist", "corrupt")
    assert "train-images-idx3-ubyte: corrupt (more than the 47,040,016 bytes of this file)" in p.stdout, err
    for base in MNIST_FILES[1:]:
        assert f"{base}: ok" in p.stdout
    assert list(work.iterdir()) == []


@pytest.mark.slow
def test_training_refuses_a_gzip_bomb(bomb_dir, work):
    cfg = _write_config(work, MNIST)
    _refused(work, bomb_dir, ["train-gd", cfg.name, "-q"],
             "train-images-idx3-ubyte.gz is corrupt", "more than the 47,040,016 bytes", "gb data fetch mnist")
    assert not (work / "runs").exists()


def test_real_mnist_still_verifies(shared_data_dir, work):
    p = run_gb(["data", "verify", "mnist", "--data-dir", shared_data_dir], work, shared_data_dir)
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip() == ""
    for base in MNIST_FILES:
        assert f"{base}: ok" in p.stdout


# ----------------------------------------------------------------------------- long values


BIG = "x" * MB


@pytest.mark.parametrize("cfg, key", [
    pytest.param({**TINY, "name": BIG}, "name:", id="name"),
    pytest.param({**TINY, "preset": BIG}, "preset:", id="preset"),
    pytest.param({**TINY, BIG: 1}, "xxxx (1,000,000 characters): unknown key", id="top-level-key"),
    pytest.param({**TINY, "training": {"epochs": 1, "lr" + BIG: 1}}, "training.lrxxxx", id="nested-key"),
    pytest.param({**TINY, "model": {"kind": BIG}}, "model.kind: unknown kind", id="model-kind"),
    pytest.param({**TINY, "dataset": {"name": BIG}}, "dataset.name: unknown name", id="dataset-name"),
    pytest.param({**TINY, "training": {"optimizer": BIG}}, "training.optimizer:", id="literal"),
    pytest.param({**TINY, "training": {"track": [BIG]}}, "training.track:", id="instrument"),
    pytest.param({**TINY, "training": {"epochs": BIG}}, "training.epochs:", id="union-field"),
    pytest.param({**TINY, "dataset": {"name": "points", "x": [[float(i)] for i in range(100_000)], "y": [3] * 100_000}},
                 "dataset.y:", id="long-list"),
])
@pytest.mark.slow
def test_a_long_value_is_shortened(cfg, key, work, tmp_path):
    _write_config(work, cfg)
    err = _refused(work, tmp_path / "data", ["train-gd", "cfg.yaml"], "cfg.yaml: ", key)
    assert "..." in err


@pytest.mark.slow
def test_a_long_output_dir_is_shortened(work, tmp_path):
    _write_config(work, {**TINY, "output": {"dir": "o" * MB}})
    err = _refused(work, tmp_path / "data", ["train-gd", "cfg.yaml"], "output.dir: oooo", "File name too long")
    assert "..." in err


@pytest.mark.parametrize("override, key", [
    pytest.param(f"model.hidden_units={'y' * ARG_MAX}", "model.hidden_units:", id="value"),
    pytest.param(f"name={'y' * ARG_MAX}", "name:", id="name"),
    pytest.param(f"model.{'y' * ARG_MAX}=1", "model.yyyy", id="unknown-key"),
    pytest.param("y" * ARG_MAX, "--set yyyy", id="no-equals"),
    pytest.param(f"training.lr=!!python/object {'y' * ARG_MAX}", "--set training.lr=!!python/object", id="yaml-tag"),
    pytest.param(f"preset={'y' * ARG_MAX}", "preset: unknown preset", id="preset"),
    pytest.param(f"output.dir={'y' * ARG_MAX}", "output.dir: yyyy", id="output-dir"),
])
@pytest.mark.slow
def test_a_long_override_is_shortened(override, key, work, tmp_path):
    _write_config(work, TINY)
    err = _refused(work, tmp_path / "data", ["train-gd", "cfg.yaml", "--set", override], key)
    assert "..." in err


# ----------------------------------------------------------------------------- config files


def test_dev_zero_is_not_a_config(work, tmp_path):
    _refused(work, tmp_path / "data", ["train-gd", "/dev/zero"], "/dev/zero: not a regular file")


def test_a_fifo_is_not_a_config(work, tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    writer_done = threading.Event()

    def writer():   # a writer that never stops: reading the FIFO would never end
        try:
            fd = os.open(fifo, os.O_WRONLY)
            with open(fd, "wb") as f:
                while not writer_done.is_set():
                    f.write(b"a: 1\n" * 1000)
        except OSError:   # the reader went away
            pass

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        _refused(work, tmp_path / "data", ["train-gd", fifo], "fifo.yaml: not a regular file")
    finally:
        writer_done.set()
        with open(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK), "rb"):   # unblock a writer still opening
            pass


@pytest.mark.slow
def test_a_config_on_one_huge_line_is_fine(work, tmp_path):
    line = yaml.safe_dump({**TINY, "name": "one-line"}, default_flow_style=True, width=1 << 30).strip()
    (work / "cfg.yaml").write_text(line + "  # " + "c" * (5 * MB) + "\n")
    p = run_gb(["train-gd", "cfg.yaml", "-q", "--out", "out"], work, tmp_path / "data")
    assert p.returncode == 0, p.stderr[-2000:]
    assert (work / "out").is_dir()


def test_a_config_past_the_size_limit_is_refused(work, tmp_path):
    from gbcli.config.loading import MAX_CONFIG_BYTES

    (work / "cfg.yaml").write_text("#" + "c" * MAX_CONFIG_BYTES + "\n")
    _refused(work, tmp_path / "data", ["train-gd", "cfg.yaml"], "cfg.yaml: ", "too large for a config")
