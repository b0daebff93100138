"""gb's messages: the library logs to the `gbcli` logger (never `print`; the `gb` command adds a handler,
a notebook uses `logging.basicConfig`), each stage appends them to `RUN_DIR/log.txt` (`run_log`), and
`Progress` reports long work (a rich bar on a terminal, else plain lines with the elapsed time and an ETA).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from pathlib import Path

from rich.markup import escape

LOGGER = "gbcli"
LINE_SECONDS = 10.0
LINE_FRACTION = 0.05
MIN_SECONDS = 2.0   # plain lines at most this often: a short wait is not a screenful
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
    from gbcli.fs.layout import RunDir
    from gbcli.fs.safe import open_append

    path = str(RunDir(run_dir).log.absolute())
    if path in _OPEN:
        yield
        return
    handler = logging.StreamHandler(open_append(path, buffering=1))
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
    """The `gb` command's handler on stdout: rich on a terminal, else plain time-stamped lines."""
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


class Progress:
    """Progress of `total` units of work: `advance(n)`, `note(**values)` (shown with the next update). A
    rich bar when `show` on a terminal; else, when `show`, plain lines (`say`) about every LINE_SECONDS
    or LINE_FRACTION of the work, never within MIN_SECONDS, and a last one. `counter`: "step {done}/{total}"."""

    def __init__(self, what: str, total: int, show: bool = True, counter: str = "step {done}/{total}", say=None,
                 describe=None, clock=time.perf_counter):
        self.what, self.total, self.show, self.counter = what, max(int(total), 1), show, counter
        self.describe = describe   # numbers -> the text of a plain line (default: "name value, ...")
        self.say = say or logging.getLogger(f"{LOGGER}.progress").info
        self.done, self.bar, self.clock, self.start = 0, None, clock, clock()
        self.numbers: dict[str, float] = {}
        self.last_line, self.last_fraction = self.start, 0.0

    def __enter__(self):
        if self.show and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeRemainingColumn

            self.bar = Bar(TextColumn(f"[bold]{escape(self.what)}"), BarColumn(), MofNCompleteColumn(),
                           TextColumn("{task.fields[numbers]}", markup=False), TimeRemainingColumn(),
                           console=Console(stderr=True), transient=True)
            self.bar.__enter__()
            self.task = self.bar.add_task(self.what, total=self.total, numbers=self._numbers())
        elif self.show:   # the counter's word in the plural: "train ...: 500 steps"
            unit = next((w for w in self.counter.split() if "{" not in w), "steps")
            self.say(f"{self.what}: {self.total} {unit if unit.endswith('s') else unit + 's'}")
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)
        elif self.show and exc[0] is None:
            self._line(final=True)

    def _numbers(self) -> str:
        return ", ".join(f"{k} {v}" if isinstance(v, int) else f"{k} {v:.4g}" for k, v in self.numbers.items()
                         if v == v)

    def note(self, **values: float) -> None:
        self.numbers.update({k: (v if isinstance(v, int) and not isinstance(v, bool) else float(v))
                             for k, v in values.items() if v is not None})
        if self.bar is not None:
            self.bar.update(self.task, numbers=self._numbers())

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.advance(self.task, n)
        elif self.show:
            now, fraction = self.clock(), self.done / self.total
            if self.done < self.total and now - self.last_line >= MIN_SECONDS and (
                    now - self.last_line >= LINE_SECONDS or fraction - self.last_fraction >= LINE_FRACTION):
                self._line()

    def _line(self, final: bool = False) -> None:
        now = self.clock()
        elapsed = now - self.start
        fraction = min(self.done / self.total, 1.0)
        eta = "" if final or fraction <= 0 else f", ETA {clock(elapsed * (1 - fraction) / fraction)}"
        numbers = self.describe(self.numbers) if self.describe is not None else self._numbers()
        self.say(f"{self.what}: {self.counter.format(done=self.done, total=self.total)} ({100 * fraction:.0f}%)"
                 + (f", {numbers}" if numbers else "") + f", elapsed {clock(elapsed)}{eta}"
                 + (" (done)" if final and self.counter.startswith("step") else ""))
        self.last_line, self.last_fraction = now, fraction
