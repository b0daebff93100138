"""The harness itself: the gb processes the tests start can take a Ctrl-C (tests/conftest.py), even when
pytest was started with SIGINT ignored (in the background of a non-interactive shell)."""

from __future__ import annotations

import subprocess
import sys


def test_a_process_the_tests_start_does_not_ignore_ctrl_c():
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"   # True: gb would keep SIGINT ignored and the Ctrl-C tests could not stop it
