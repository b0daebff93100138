"""Where gb's messages go: the `gbcli` logger, a run directory's `log.txt`, and progress a person
can follow on a terminal or in a file.

- The library logs through `logging.getLogger("gbcli...")`, never `print`. The `gb` command puts a
  handler on the `gbcli` logger (rich on a terminal, plain lines otherwise); a notebook sees the
  messages with `logging.basicConfig(level=logging.INFO)`.
- Every stage that writes a run directory appends its messages to `RUN_DIR/log.txt` while it runs
  (`run_log`), opened without following a symlink.
- `StepProgress` shows long work: a rich bar on a terminal; elsewhere (a Slurm log, nohup, CI) a
  plain line about every `LINE_SECONDS` seconds or `LINE_FRACTION` of the work, with the step,
  the latest numbers, the elapsed time and an ETA.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from pathlib import Path

LOGGER = "gbcli"
LINE_SECONDS = 10.0
LINE_FRACTION = 0.05
log = logging.getLogger(LOGGER)
_OPEN: dict[str, logging.Handler] = {}


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(record.created))
        return f"{stamp} {record.getMessage()}"


@contextlib.contextmanager
def run_log(run_dir: str | Path):
    """Append the `gbcli` logger's messages to RUN_DIR/log.txt while the block runs (re-entrant per
    file; never through a symlink: an OSError then, which the caller's checks prevent)."""
    path = str(Path(run_dir, "log.txt").absolute())
    if path in _OPEN:
        yield
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    handler = logging.StreamHandler(os.fdopen(fd, "a", buffering=1))
    handler.setFormatter(_Format())
    handler.setLevel(logging.INFO)
    _OPEN[path] = handler
    log.addHandler(handler)
    level = log.level
    if log.level == logging.NOTSET or log.level > logging.INFO:
        log.setLevel(logging.INFO)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        del _OPEN[path]
        with contextlib.suppress(OSError):
            handler.stream.close()


def console_handler(quiet: bool = False) -> logging.Handler:
    """The `gb` command's handler for the `gbcli` logger, on stdout with the command's other output:
    rich on a terminal, plain time-stamped lines otherwise (a Slurm log, nohup, CI)."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(console=Console(), show_time=False, show_path=False,
                                               show_level=False, markup=False, rich_tracebacks=False)
    else:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(_Format())
    handler.setLevel(logging.WARNING if quiet else logging.INFO)
    return handler


def clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


class StepProgress:
    """Progress of `total` steps: `advance(n)`, `note(**numbers)` (e.g. loss, errors, shown with the
    next update). A rich bar when `show` and stderr is a terminal; plain log lines at a bounded rate
    when `show` and it is not; nothing when not `show`."""

    def __init__(self, what: str, total: int, show: bool = True, logger: logging.Logger | None = None):
        self.what, self.total, self.show = what, max(int(total), 1), show
        self.logger = logger or logging.getLogger(f"{LOGGER}.progress")
        self.done = 0
        self.numbers: dict[str, float] = {}
        self.bar = None
        self.start = time.perf_counter()
        self.last_line, self.last_fraction = self.start, 0.0

    def __enter__(self):
        if self.show and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn(f"[bold]{self.what}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[numbers]}"), TimeRemainingColumn(),
                                console=Console(stderr=True), transient=True)
            self.bar.__enter__()
            self.task = self.bar.add_task(self.what, total=self.total, numbers="")
        elif self.show:
            self.logger.info(f"{self.what}: {self.total} steps")
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)
        elif self.show and exc[0] is None:
            self._line(final=True)

    def _numbers(self) -> str:
        return ", ".join(f"{k} {v:.4g}" for k, v in self.numbers.items() if v == v)

    def note(self, **numbers: float) -> None:
        self.numbers.update({k: float(v) for k, v in numbers.items() if v is not None})
        if self.bar is not None:
            self.bar.update(self.task, numbers=self._numbers())

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.advance(self.task, n)
        elif self.show:
            now, fraction = time.perf_counter(), self.done / self.total
            if now - self.last_line >= LINE_SECONDS or fraction - self.last_fraction >= LINE_FRACTION:
                self._line()

    def _line(self, final: bool = False) -> None:
        now = time.perf_counter()
        elapsed = now - self.start
        fraction = min(self.done / self.total, 1.0)
        eta = "" if final or fraction <= 0 else f", ETA {clock(elapsed * (1 - fraction) / fraction)}"
        numbers = self._numbers()
        self.logger.info(f"{self.what}: step {self.done}/{self.total} ({100 * fraction:.0f}%)"
                         + (f", {numbers}" if numbers else "") + f", elapsed {clock(elapsed)}{eta}"
                         + (" (done)" if final else ""))
        self.last_line, self.last_fraction = now, fraction
