"""Where a sweep's points run: `Executor`, over a local pool and a Slurm array. A task is a function's
argument tuple, its second element the point directories (one record back per point)."""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Callable

from gbcli import interrupts
from gbcli.logs import Progress, clock
from gbcli.fs import layout
from gbcli.fs.layout import RunDir
from gbcli.fs.safe import is_dir, is_file, mtime
from gbcli.store.records import FailureRecord, PointState, point_state


class Executor(ABC):
    """Runs a sweep's tasks, knowing nothing of what a point does."""

    def __init__(self, jobs: int, echo=print):
        self.jobs, self.echo = jobs, echo

    def check(self) -> None:
        """Refuse (GbError), before anything is written, when the tasks cannot run here."""

    @abstractmethod
    def submit(self, fn: Callable, tasks: list[tuple]) -> list:
        """Start every task; one handle each."""

    @abstractmethod
    def wait(self, pending: list, timeout: float) -> list:
        """The handles finished (or lost) within `timeout` seconds."""

    @abstractmethod
    def result(self, handle, task: tuple) -> list[dict]:
        """A finished handle's point records (failure records when the task died)."""

    @abstractmethod
    def cancel(self, pending: list, tasks: dict) -> tuple[Callable[[str], bool], str]:
        """Stop every unfinished handle; (whether a point of theirs had started, a note for the user)."""

    def running(self, pending: list, tasks: dict) -> int:
        """How many points run now (at most `jobs` tasks: the first pending ones)."""
        return sum(len(tasks[h][1]) for h in pending[: self.jobs])

    def run(self, fn: Callable, tasks: list[tuple], show: bool, echo, names: dict[str, str] | None = None) -> None:
        """Submit every task, report each point once its folder shows it done; on an interrupt cancel, record."""
        total = sum(len(t[1]) for t in tasks)
        last = [""]   # the point reported last, named in the next progress line (not in the last line)
        with Progress("sweep", total, show=show, counter="{done}/{total} points", say=echo, describe=lambda n:
                      f"{n.get('failed', 0)} failed" + (f", last {last[0]}" if last[0] else "")) as bar:
            bar.note(failed=0, running=0)
            start = time.time()
            with interrupts.deferred():   # workers start (or sbatch runs) with SIGINT/SIGTERM held
                handles = self.submit(fn, tasks)
            by_handle = dict(zip(handles, tasks))
            pending = list(handles)
            failed, reported = 0, set()
            plain = show and bar.bar is None   # lines, not a bar: a file, a pipe, a Slurm log
            said = time.monotonic()

            def report(d: str, record: dict | None) -> None:
                nonlocal failed, said
                reported.add(d)
                name = f" ({names[d]})" if (names or {}).get(d) else ""
                done = record is None or record["status"] == PointState.DONE
                if not done:
                    failed += 1
                    echo(f"point {Path(d).name}{name} FAILED at {record['stage']}: {record['message']}"
                         + (f" (log: {record['log']})" if record.get("log") else ""))
                    said = time.monotonic()
                last[0] = "" if len(reported) == total else \
                    f"{Path(d).name}{name} {PointState.DONE if done else PointState.FAILED}"
                lines = bar.last_line
                bar.note(failed=failed)
                bar.advance()
                if bar.last_line != lines:   # a progress line was printed
                    said = time.monotonic()

            try:
                bar.note(failed=failed, running=self.running(pending, by_handle))
                while pending:
                    for h in self.wait(pending, 1.0):
                        pending.remove(h)
                        task = by_handle[h]
                        for record, d in zip(self.result(h, task), task[1]):
                            if d not in reported:
                                report(d, record)
                    for d in [d for h in pending for d in by_handle[h][1]]:   # points of running tasks, finished
                        if d not in reported and _written_since(RunDir(d).errors, start):
                            report(d, None)
                    running = max(0, self.running(pending, by_handle)
                                  - sum(d in reported for h in pending for d in by_handle[h][1]))
                    bar.note(running=running)
                    if plain and pending and time.monotonic() - said >= HEARTBEAT_SECONDS:
                        echo(f"sweep: {len(reported)}/{total} points done, {failed} failed, {running} running, "
                             f"elapsed {clock(time.time() - start)}")
                        said = time.monotonic()
            except BaseException as exc:   # interrupted (or the sweep process failed): stop now, not after the queue
                started, note = self.cancel(pending, by_handle)
                stopped([d for h in pending for d in by_handle[h][1]], exc, started)
                if note and isinstance(exc, interrupts.Interrupted):
                    exc.notes.append(note)
                elif note:
                    echo(note)
                raise


HEARTBEAT_SECONDS = 10.0   # the longest a sweep's plain progress stays silent while points run


def _written_since(path: Path, since: float) -> bool:
    try:
        return mtime(path) >= since - 1
    except OSError:   # not there
        return False


def ran_since(d: str, since: float) -> bool:
    """Whether point directory `d` was at work since `since`: its log.txt or its lock changed."""
    return any(_written_since(path, since) for path in (RunDir(d).log, RunDir(d).root / layout.LOCK))


def stopped(dirs: list[str], exc: BaseException, started: Callable[[str], bool]) -> None:
    """failed.json with status "interrupted" for each point of `dirs` that had started and is not done."""
    why = (f"the sweep was interrupted ({getattr(exc, 'signame', 'SIGINT')})"
           if isinstance(exc, (interrupts.Interrupted, KeyboardInterrupt))   # the latter: library use, no handlers
           else f"the sweep process stopped ({type(exc).__name__}: {exc})".splitlines()[0]) + " while this point ran"
    for d in map(Path, dirs):
        with contextlib.suppress(OSError):   # best effort: the point is not done either way
            run = RunDir(d)
            if not is_dir(d) or point_state(d) == PointState.DONE or not started(str(d)):
                continue
            stage = "train-gd" if not is_file(run.summary) else "compare" if is_dir(run.tables) else "fit-svm"
            FailureRecord.of_point(d, PointState.INTERRUPTED, stage, f"{why}; rerun the sweep to run it again",
                                   at=time.strftime("%Y-%m-%d %H:%M:%S")).write(d)


def died(dirs: list[str], stage: str, log: str, message: str) -> list[dict]:
    """The record of each point of a task that died, written to its failed.json when possible."""
    failure = FailureRecord(PointState.FAILED, stage, message.splitlines()[0] if message else "", log)
    for d in dirs:
        with contextlib.suppress(OSError):
            failure.write(d)
    return [failure.as_dict()] * len(dirs)


