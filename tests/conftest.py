"""Shared pytest fixtures, and the one place that decides where the tests read MNIST from."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

# The interrupt tests press Ctrl-C on gb as a terminal does. pytest started in the background of a
# non-interactive shell inherits SIGINT ignored and passes that on, and gb keeps a signal ignored when
# it started ignored (as under nohup), so those gb processes would never see the Ctrl-C: start them
# with SIGINT at its default instead (a handler here is reset to the default in each child).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO_ROOT = Path(__file__).resolve().parents[1]
MNIST_FILE = Path("mnist") / "train-images-idx3-ubyte"   # .gz or not: the file every MNIST load opens first


def _holds_mnist(folder: Path) -> bool:
    return any((folder / MNIST_FILE.parent / f"{MNIST_FILE.name}{ext}").is_file() for ext in (".gz", ""))


def find_data() -> tuple[Path | None, str]:
    """(the folder holding mnist/, '') or (None, why not). $GB_DATA_DIR when set (it is then the
    only candidate: a folder named on purpose is not silently replaced), else ../shared/data beside
    the repository (what the Makefile exports), else gb's own default, ~/.cache/gb/data."""
    env = os.environ.get("GB_DATA_DIR")
    if env:
        folder = Path(env).expanduser()
        return (folder, "") if _holds_mnist(folder) else (None, f"GB_DATA_DIR={env} holds no {MNIST_FILE}[.gz]")
    for folder in (REPO_ROOT.parent / "shared" / "data", Path.home() / ".cache" / "gb" / "data"):
        if _holds_mnist(folder):
            return folder, ""
    return None, "MNIST files not found: set GB_DATA_DIR to a folder with mnist/ (or run `gb data fetch mnist`)"


DATA_DIR, NO_DATA_REASON = find_data()


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """Folder holding mnist/ with the real IDX files (`find_data`); the test skips with the reason
    when there is none. Every test that reads MNIST, in its own process or in a `gb` it starts,
    asks for this fixture (or a fixture built on it)."""
    if DATA_DIR is None:
        pytest.skip(NO_DATA_REASON)
    return DATA_DIR


def pytest_configure(config):
    """The folder found is exported as $GB_DATA_DIR, so a test's own loads and the `gb` processes it
    starts read the same files as the fixture (the Makefile sets it only when ../shared/data exists).

    Under `pytest -n 2` (make test), each worker computes on one torch and BLAS thread: two
    workers of two threads each on the 2-core machine wait on each other many times over."""
    if DATA_DIR is not None and not os.environ.get("GB_DATA_DIR"):
        os.environ["GB_DATA_DIR"] = str(DATA_DIR)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import threadpoolctl
        import torch

        torch.set_num_threads(1)
        threadpoolctl.threadpool_limits(limits=1, user_api="blas")
