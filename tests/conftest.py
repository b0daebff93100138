"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """Folder holding mnist/ with the real IDX files: $GB_DATA_DIR, else ../shared/data."""
    env = os.environ.get("GB_DATA_DIR")
    if env:
        return Path(env)
    shared = REPO_ROOT.parent / "shared" / "data"
    if shared.is_dir():
        return shared
    pytest.skip("MNIST files not found: set GB_DATA_DIR to a folder with mnist/")


def pytest_configure(config):
    """Under `pytest -n 2` (make test), each worker computes on one torch and BLAS thread: two
    workers of two threads each on the 2-core machine wait on each other many times over."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import threadpoolctl
        import torch

        torch.set_num_threads(1)
        threadpoolctl.threadpool_limits(limits=1, user_api="blas")
