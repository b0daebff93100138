"""How a record was made, under `provenance` in every record and marker: `Clock()` when the work starts,
`clock.stamp()` when its record is written (versions, git commit, machine, command, UTC times, wall and
CPU seconds). No torch import: its version is recorded when the work loaded it.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parents[1]


def git_state() -> dict:
    """{"commit": sha, "dirty": bool} when gb runs from a git checkout, else {} (an installed wheel)."""
    if not (SOURCE_ROOT / ".git").exists():
        return {}
    try:
        head = subprocess.run(["git", "-C", str(SOURCE_ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=5)
        if head.returncode != 0:
            return {}
        status = subprocess.run(["git", "-C", str(SOURCE_ROOT), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None}


@functools.lru_cache(maxsize=1)
def _static() -> dict:
    import numpy

    import gbcli

    return {"gb_version": gbcli.__version__, **git_state(), "python": platform.python_version(),
            "numpy": numpy.__version__, "host": socket.gethostname(), "platform": platform.platform()}


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class Clock:
    """Started when the work starts; `stamp()` is the provenance of a record written now."""

    def __init__(self) -> None:
        self.started = utc_now()
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def stamp(self) -> dict:
        """The versions and the machine (cached per process), the BLAS and torch as loaded now, the command, times."""
        env = dict(_static())
        torch = sys.modules.get("torch")
        if torch is not None:
            env.update(torch=torch.__version__, torch_threads=torch.get_num_threads())
        try:
            from threadpoolctl import threadpool_info

            env["blas"] = [{k: info.get(k) for k in ("internal_api", "version", "num_threads")}
                           for info in threadpool_info() if info.get("user_api") == "blas"]
        except Exception:   # noqa: BLE001 (only a description)
            env["blas"] = []
        argv = [Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python", *sys.argv[1:]]
        return {**env, "pid": os.getpid(), "command": shlex.join(argv), "started": self.started, "ended": utc_now(),
                "wall_seconds": round(time.perf_counter() - self.wall, 3),
                "cpu_seconds": round(time.process_time() - self.cpu, 3)}
