"""Where a sweep's points run: one interface, `Executor` (check, submit, wait, cancel), with a local
process pool (`local.LocalPool`) and a Slurm job array through submitit (`slurm.SlurmArray`) behind it.
The sweep asks `make_executor` and never which one it got.

Both take a function and its argument tuples (a task: a group of points, its second element the
list of their directories; the function returns one record per point), so they know nothing of
what a point does. `Executor.run` is the one loop that waits: it reports each finished point to
the one progress reporter (`gbcli.logs.Progress`: points done, failed and running, an ETA) and
names a failed point on its own line.

Interrupted (Ctrl-C, SIGTERM: `gbcli.interrupts`), `run` stops at once: the executor cancels what
is queued and stops what runs (the pool terminates its workers, the Slurm array is cancelled); the
points that were running get a failed.json with status "interrupted" (they are not done: a rerun
runs them again), and the exception goes on to the CLI, which prints one line and exits 130.
"""

from __future__ import annotations

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
    """Runs a sweep's tasks somewhere. `check` refuses (GbError) before anything is written;
    `submit` starts every task and returns one handle each; `wait` returns the handles finished
    (or lost) within `timeout` seconds; `result` gives a finished handle's point records (failure
    records when the task died); `cancel` stops the unfinished handles and says which points had
    started."""

    name = ""

    def __init__(self, jobs: int, echo=print):
        self.jobs, self.echo = jobs, echo

    def check(self) -> None:
        """Refuse, before anything is written, when the tasks cannot run here (GbError)."""

    @abstractmethod
    def submit(self, fn: Callable, tasks: list[tuple]) -> list:
        ...

    @abstractmethod
    def wait(self, pending: list, timeout: float) -> list:
        ...

    @abstractmethod
    def result(self, handle, task: tuple) -> list[dict]:
        ...

    @abstractmethod
    def cancel(self, pending: list, tasks: dict) -> tuple[Callable[[str], bool], str]:
        """Stop every unfinished handle (`tasks`: handle -> its task); (whether a point directory of
        theirs had started and wrote no record of its own, a note for the user)."""

    def running(self, pending: list, tasks: dict) -> int:
        """How many points run now (at most `jobs` tasks: the first pending ones)."""
        return sum(len(tasks[h][1]) for h in pending[: self.jobs])

    def run(self, fn: Callable, tasks: list[tuple], show: bool, echo, names: dict[str, str] | None = None) -> None:
        """Submit every task, wait for all, report each point; on an interrupt cancel and record.
        A point is reported when its folder shows it done (`finished_here`), not only when its task
        returns: a task's points (a group trained as one computation) end one by one, and a task
        may hold every point of the sweep. `names`: a point directory -> its readable name. When
        the progress is plain lines (not a terminal's bar), a wait of HEARTBEAT_SECONDS without a
        line says how many points are done and running."""
        total = sum(len(t[1]) for t in tasks)
        names = names or {}
        last = [""]   # the point reported last, named in the next progress line (not in the last line)

        def describe(n: dict) -> str:
            return f"{n.get('failed', 0)} failed" + (f", last {last[0]}" if last[0] else "")

        with Progress("sweep", total, show=show, counter="{done}/{total} points", say=echo, describe=describe) as bar:
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
                name = f" ({names[d]})" if names.get(d) else ""
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
                    for h in pending:   # points of running tasks that have finished
                        for d in by_handle[h][1]:
                            if d not in reported and finished_here(d, start):
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
                if note:
                    if isinstance(exc, interrupts.Interrupted):
                        exc.notes.append(note)
                    else:
                        echo(note)
                raise


HEARTBEAT_SECONDS = 10.0   # the longest a sweep's plain progress stays silent while points run


def _written_since(path: Path, since: float) -> bool:
    try:
        return mtime(path) >= since - 1
    except OSError:   # not there
        return False


def finished_here(d: str, since: float) -> bool:
    """Whether point directory `d` finished in this run: its tables/errors.csv (written last, when
    the point is done) was written since `since`. Only for the progress: the sweep's own verdict on
    a point is its records (`gbcli.runs.sweep.done_tables`)."""
    return _written_since(RunDir(d).errors, since)


def ran_since(d: str, since: float) -> bool:
    """Whether point directory `d` was at work in this run: its log.txt (appended to when a point
    starts) or its lock (written when its training starts, in a group) changed since `since`."""
    return any(_written_since(path, since) for path in (RunDir(d).log, RunDir(d).root / layout.LOCK))


def _stage(d: Path) -> str:
    """The stage a stopped point was in, as its files show it (gd/summary.json: trained)."""
    run = RunDir(d)
    if not is_file(run.summary):
        return "train-gd"
    return "compare" if is_dir(run.tables) else "fit-svm"


def stopped(dirs: list[str], exc: BaseException, started: Callable[[str], bool]) -> None:
    """failed.json with status "interrupted" for each point of `dirs` that had started (`started`)
    and is not done (tables/errors.csv, written last): a rerun runs it again. Points of tasks that
    had finished wrote their own records; queued points never started and get nothing."""
    if isinstance(exc, (interrupts.Interrupted, KeyboardInterrupt)):   # the latter: library use, no handlers
        why = f"the sweep was interrupted ({getattr(exc, 'signame', 'SIGINT')}) while this point ran"
    else:
        why = f"the sweep process stopped ({type(exc).__name__}: {exc})".splitlines()[0] + " while this point ran"
    for d in map(Path, dirs):
        try:
            run = RunDir(d)
            if not is_dir(d) or point_state(d) == PointState.DONE or not started(str(d)):
                continue
            FailureRecord(PointState.INTERRUPTED, _stage(d), f"{why}; rerun the sweep to run it again",
                          str(run.log.resolve()) if is_file(run.log) else "",   # only a file that exists
                          at=time.strftime("%Y-%m-%d %H:%M:%S")).write(d)
        except OSError:   # best effort: the point is not done either way
            pass


def died(dirs: list[str], stage: str, log: str, message: str) -> list[dict]:
    """The record of each point of a task that died, written to its failed.json when possible."""
    failure = FailureRecord(PointState.FAILED, stage, message.splitlines()[0] if message else "", log)
    for d in dirs:
        try:
            failure.write(d)
        except OSError:
            pass
    return [failure.as_dict()] * len(dirs)


