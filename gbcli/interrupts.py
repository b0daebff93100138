"""Ctrl-C and SIGTERM: every gb command stops promptly, says so in one line and exits 130.

`install` turns both signals into `Interrupted`, a BaseException (an `except Exception` that records a
failure never swallows it) but no KeyboardInterrupt (typer would exit silently). Python raises it only
between bytecodes: a watchdog thread woken by the signal (`signal.set_wakeup_fd`) ends the process
GRACE seconds later if the main thread is stuck in C (results are written atomically). A sweep's pool
workers start with both signals blocked (`deferred`), then ignore SIGINT (`worker_init`: the parent
decides and terminates them). A second signal while the first is handled exits at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import warnings
import time

SIGNALS = (signal.SIGINT, signal.SIGTERM)
HINT = "finished work is kept, rerun the same command to resume"
EXIT_CODE = 130   # what a shell reports for a command stopped by Ctrl-C (128 + SIGINT)
GRACE = 2.0   # seconds the main thread has to take a signal before the watchdog ends the process


class Interrupted(BaseException):
    """A SIGINT or SIGTERM reached the main process. `signame`: "SIGINT" or "SIGTERM"; `notes`:
    what was done about it on the way out (e.g. "Slurm array 123 cancelled"), for the one line."""

    def __init__(self, signame: str):
        super().__init__(signame)
        self.signame = signame
        self.notes: list[str] = []


_state = {"signal": None, "announced": False, "exiting": False, "handled": 0, "watchdog": None,
          "deferred": 0, "pending": None}
_lock = threading.RLock()   # one line, whoever (the main thread, the watchdog) prints it


def line(signame: str, notes: list[str] | tuple[str, ...] = ()) -> str:
    """The one line on stderr: `gb: interrupted (SIGINT); <notes; >finished work is kept, ...`."""
    return "; ".join([f"gb: interrupted ({signame})", *notes, HINT])


def announce(exc: Interrupted) -> str:
    """The line for `exc`; from now on a further signal exits at once, without a second line."""
    with _lock:
        _state["announced"] = True
        return line(exc.signame, exc.notes)


def _exit_now(signame: str, notes: list[str]) -> None:
    """The line (unless printed already), straight to fd 2, and the end of the process."""
    with _lock:
        if not _state["announced"]:
            _state["announced"] = True
            with contextlib.suppress(OSError):
                os.write(2, (line(signame, notes) + "\n").encode())
        os._exit(EXIT_CODE)


def _handler(signum: int, frame) -> None:
    name = signal.Signals(signum).name
    with _lock:
        _state["handled"] += 1
        first = _state["signal"] is None and not _state["exiting"]
        if first:
            _state["signal"] = name
            if _state["deferred"]:   # raised when the block ends (`deferred`)
                _state["pending"] = name
                return
    if first:
        raise Interrupted(name)
    # a second signal while the first is handled, or one once the command is over (an exception raised
    # in an exit handler is printed, not handled): now. Pool workers die with this process (PDEATHSIG).
    _exit_now(_state["signal"] or name, ["stopped at once by a second signal"] if _state["signal"] else [])


def _watch(fd: int) -> None:
    """The watchdog: each byte is a signal; if the main thread has not handled it within GRACE seconds
    (a long call into C), end now."""
    seen = 0
    while True:
        try:
            data = os.read(fd, 64)   # EINTR is retried (PEP 475)
        except OSError:
            return
        if not data:
            return
        for signum in data:
            if signum not in SIGNALS:
                continue
            seen += 1
            deadline = time.monotonic() + GRACE
            while _state["handled"] < seen and (time.monotonic() < deadline or _state["deferred"]):
                time.sleep(0.05)   # (a `deferred` block, e.g. a Slurm submission, is waited for)
            if _state["handled"] < seen:
                _exit_now(_state["signal"] or signal.Signals(signum).name, [])


def install() -> None:
    """SIGINT and SIGTERM raise `Interrupted` in the main thread, and the watchdog runs; a signal ignored
    when gb started (`nohup`) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        return
    _state.update(signal=None, announced=False, exiting=False)
    handled = [sig for sig in SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN]
    for sig in handled:
        signal.signal(sig, _handler)
    if handled and _state["watchdog"] is None:
        r, w = os.pipe()   # not inherited (PEP 446)
        os.set_blocking(w, False)   # the C handler must never block on a full pipe
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        _state["watchdog"] = threading.Thread(target=_watch, args=(r,), name="gb-interrupt-watchdog", daemon=True)
        _state["watchdog"].start()


def exiting() -> None:
    """The command is over: a signal now ends the process at once (with the line unless printed), not
    with an exception an exit handler would print as a traceback."""
    _state["exiting"] = True


@contextlib.contextmanager
def deferred():
    """SIGINT and SIGTERM held, not lost, while the block runs (starting pool workers, which inherit the
    mask; a submission whose job ids must be known): raised as `Interrupted` when it ends."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    _state["deferred"] += 1
    try:
        yield
    finally:
        _state["deferred"] -= 1
        signal.pthread_sigmask(signal.SIG_SETMASK, old)   # a signal held by the mask is handled here
        name, _state["pending"] = _state["pending"], None
        if name and not _state["deferred"]:
            raise Interrupted(name)


def _worker_term(signum: int, frame) -> None:
    """A pool worker's SIGTERM: in a task, the first raises `Interrupted` (a training then writes its
    checkpoint), silently; otherwise, or a second, the worker ends at once."""
    if _state["signal"] is None and _state.get("armed"):
        _state["signal"] = "SIGTERM"
        warnings.simplefilter("ignore")   # a library interrupted mid-import would warn onto the terminal
        raise Interrupted("SIGTERM")
    os._exit(EXIT_CODE)   # outside a task (starting up, between tasks), or a second signal: at once


@contextlib.contextmanager
def raising_in_worker():
    """In a pool worker: SIGTERM raises `Interrupted` while the block (a task) runs."""
    _state["armed"] = True
    try:
        yield
    finally:
        _state["armed"] = False


def worker_init() -> None:
    """A pool worker's initializer: SIGINT ignored (a Ctrl-C while it started is discarded), SIGTERM
    `_worker_term`; then both unblocked."""
    _state.update(signal=None, announced=True, exiting=False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _worker_term)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


# ------------------------------------------------------------ a checkpoint asked for by a signal

_checkpoint_asked = threading.Event()


def checkpoint_on(signum: int) -> None:
    """From now on `signum` only asks the training for a checkpoint at its next step (a Slurm task: scancel's
    or a requeue's SIGTERM comes KillWait seconds before the SIGKILL)."""
    signal.signal(signum, lambda *_: _checkpoint_asked.set())


def checkpoint_asked() -> bool:
    """True once after a signal of `checkpoint_on` arrived (the training then saves at once)."""
    if _checkpoint_asked.is_set():
        _checkpoint_asked.clear()
        return True
    return False
