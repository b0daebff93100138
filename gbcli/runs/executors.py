"""Where a sweep's points run: a local process pool or a Slurm job array (through submitit).

Both take a function and its argument tuples (the point's config and directory), so they know
nothing of what a point does; progress shows points done, failed and running, and an ETA.

Interrupted (Ctrl-C, SIGTERM: `gbcli.interrupts`), both stop at once: the local pool cancels its
queued tasks and terminates its workers, the Slurm executor cancels its job array; the points that
were running get a failed.json with status "interrupted" (they are not done: a rerun runs them
again), and the exception goes on to the CLI, which prints one line and exits 130.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing.connection import wait as wait_for
from pathlib import Path
from typing import Callable

import submitit
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from gbcli import interrupts
from gbcli.errors import GbError
from gbcli.io import write_json
from gbcli.logs import LINE_FRACTION, LINE_SECONDS, clock
from gbcli.text import shorten

STOP_SECONDS = 3   # how long terminated workers get to exit before they are killed
SINFO_SECONDS = 10   # how long the Slurm controller gets to answer `sinfo -h`
SLURM_TOOLS = ("sbatch", "srun", "sinfo")   # srun: submitit starts each task with it
QUEUE_SECONDS = 15   # how often the sweep asks `squeue` whether its unfinished tasks are still there
GONE_SECONDS = 30    # how long a task may be out of the queue (or ended) without a result before it counts as dead
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
                   "DEADLINE", "SPECIAL_EXIT", "REVOKED"})   # squeue's states of a task that will not run again
# the command-line flags of the sweep keys they override (for a message about a bad value)
FLAGS = {"partition": "--partition", "time_min": "--time", "cpus": "--cpus", "mem_gb": "--mem", "gpus": "--gpus",
         "account": "--account", "qos": "--qos", "constraint": "--constraint"}


def _die_with_parent() -> None:
    """Worker initializer: on Linux, get SIGKILLed when the sweep process dies (kill -9 included),
    so no orphan keeps writing into a directory that a rerun owns; SIGINT ignored (the sweep
    process stops its workers itself: `gbcli.interrupts.worker_init`)."""
    interrupts.worker_init()
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        parent = mp.parent_process()
        if parent is not None and os.getppid() != parent.pid:   # the parent died before the prctl
            os._exit(1)
    except Exception:
        pass


def run_local(fn: Callable, tasks: list[tuple], jobs: int, progress: bool, echo, threads: int | None = 1) -> None:
    """`fn(*task, threads)` for every task in a pool of `jobs` processes, with `threads` torch
    threads each (None: the cores split, jobs x threads <= cores). One thread per job is the
    default: on a machine whose cores are shared, two threads per job ran 2-10x slower than one
    (issue 13; benchmarks in BENCHMARKS.md). A task is a group of points: its second element is
    the list of their directories, and `fn` returns one record per point."""
    threads = threads or max(1, (os.cpu_count() or 1) // jobs)
    tasks = [(*t, threads) for t in tasks]
    start = time.time()
    with _Progress(sum(len(t[1]) for t in tasks), progress, echo) as bar:
        # not `with ProcessPoolExecutor`: its exit waits for every queued task, so an interrupt
        # would let the whole grid run first; the pool is shut down below, or stopped (_stop_pool)
        pool = ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=_die_with_parent)
        futures: dict = {}
        try:
            with interrupts.deferred():   # the workers start (on submit) with SIGINT/SIGTERM held
                for t in tasks:
                    futures[pool.submit(fn, *t)] = t
            pending = set(futures)
            bar.running(_points(pending, futures, jobs))
            for fut in as_completed(futures):
                pending.discard(fut)
                try:
                    results = fut.result()
                except Exception as exc:   # the worker died (killed, out of memory): its points failed
                    results = _died(futures[fut][1], "worker", "", f"the worker process died: {type(exc).__name__}: {exc}")
                for result, d in zip(results, futures[fut][1]):
                    bar.finished(result, Path(d).name)
                bar.running(_points(pending, futures, jobs))
            pool.shutdown(wait=True)
        except BaseException as exc:   # interrupted (or the sweep process failed): stop now, not after the queue
            running = [f for f in futures if not f.done()]   # before the pool fails them (BrokenProcessPool)
            _stop_pool(pool)
            _stopped([d for f in running if not _returned(f) for d in futures[f][1]], exc,
                     lambda d: _ran_since(d, start))
            raise


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel the queued tasks and end the workers now: SIGTERM, then SIGKILL for any still there
    after STOP_SECONDS (one that was still starting holds SIGTERM until its initializer ran).
    Python 3.11 has no public API for a pool's processes: `pool._processes` maps pid -> Process;
    it is read before `shutdown`, which drops it. The pool's own thread then sees its workers
    gone, fails the remaining futures (BrokenProcessPool) and ends, so the exit does not wait."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        try:
            p.terminate()
        except Exception:   # exited already
            pass
    left = {p.sentinel: p for p in procs}
    deadline = time.monotonic() + STOP_SECONDS
    while left and time.monotonic() < deadline:
        for s in wait_for(list(left), timeout=max(0.0, deadline - time.monotonic())):
            left.pop(s)
    for p in left.values():
        try:
            p.kill()
        except Exception:
            pass
    if left:
        wait_for(list(left), timeout=STOP_SECONDS)


def _returned(fut) -> bool:
    """Whether a task finished normally (its worker wrote its points' records) while the pool stopped."""
    return fut.done() and not fut.cancelled() and fut.exception() is None


def _ran_since(d: str, since: float) -> bool:
    """Whether point directory `d` was at work in this run: its log.txt (appended to when a point
    starts) or its lock (written when its training starts, in a group) changed since `since`."""
    for name in ("log.txt", ".gb.lock"):
        try:
            if (Path(d) / name).stat().st_mtime >= since - 1:
                return True
        except OSError:
            pass
    return False


def _stage(d: Path) -> str:
    """The stage a stopped point was in, as its files show it (gd/summary.json: trained)."""
    if not (d / "gd" / "summary.json").is_file():
        return "train-gd"
    return "compare" if (d / "tables").is_dir() else "fit-svm"


def _stopped(dirs: list[str], exc: BaseException, started: Callable[[str], bool]) -> None:
    """failed.json with status "interrupted" for each point of `dirs` that had started (`started`)
    and is not done (tables/errors.csv, written last): a rerun runs it again. Points of tasks that
    had finished wrote their own records; queued points never started and get nothing."""
    if isinstance(exc, (interrupts.Interrupted, KeyboardInterrupt)):   # the latter: library use, no handlers
        why = f"the sweep was interrupted ({getattr(exc, 'signame', 'SIGINT')}) while this point ran"
    else:
        why = f"the sweep process stopped ({type(exc).__name__}: {exc})".splitlines()[0] + " while this point ran"
    for d in map(Path, dirs):
        try:
            if not d.is_dir() or (d / "tables" / "errors.csv").is_file() or not started(str(d)):
                continue
            write_json(d / "failed.json", {"status": "interrupted", "stage": _stage(d),
                                           "message": f"{why}; rerun the sweep to run it again",
                                           "log": str((d / "log.txt").resolve()),
                                           "at": time.strftime("%Y-%m-%d %H:%M:%S")})
        except OSError:   # best effort: the point is not done either way
            pass


def _points(pending: set, futures: dict, jobs: int) -> int:
    """Points in the (at most `jobs`) tasks running now: the first pending ones, in submission order."""
    return sum(len(futures[f][1]) for f in [f for f in futures if f in pending][:jobs])


def _died(dirs: list[str], stage: str, log: str, message: str) -> list[dict]:
    """The record of each point of a task that died, written to its failed.json when possible."""
    result = {"status": "failed", "stage": stage, "log": log, "message": message.splitlines()[0] if message else ""}
    for d in dirs:
        try:
            write_json(Path(d) / "failed.json", result)
        except OSError:
            pass
    return [result] * len(dirs)


def slurm_options(sweep, overrides: dict | None = None) -> dict:
    """The sweep section's options (a `SweepConfig`) with the command line's overrides, each
    validated as its config key would be (a bad `--account` is refused as `sweep.account` is)."""
    from pydantic import ValidationError

    merged = sweep.model_copy()
    for key, value in (overrides or {}).items():
        try:
            setattr(merged, key, value)   # the section validates assignments
        except ValidationError as exc:
            msg = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            raise GbError(f"{FLAGS.get(key, key)}: {msg}") from None
    return merged.model_dump()


def check_slurm(timeout: float = SINFO_SECONDS) -> None:
    """Refuse (GbError) unless this machine can submit and run a job array: `sbatch`, `srun` and
    `sinfo` on PATH and a controller that answers `sinfo -h` within `timeout` seconds. Nothing
    falls back to running the points here."""
    for tool in SLURM_TOOLS:
        if not shutil.which(tool):
            raise GbError(f"--executor slurm: no `{tool}` on PATH (gb needs the Slurm client commands "
                          f"{', '.join(SLURM_TOOLS)}; scripts/slurm-cluster.sh start brings up a single-node cluster)")
    try:
        proc = subprocess.Popen(["sinfo", "-h"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    except OSError as exc:
        raise GbError(f"--executor slurm: `sinfo` cannot run: {exc.strerror or exc}") from None
    try:
        _, err = proc.communicate(timeout=timeout)
    except BaseException as exc:   # a controller that hangs (or an interrupt): end sinfo and what it started
        try:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=5)
        except (OSError, subprocess.SubprocessError):
            pass
        if isinstance(exc, subprocess.TimeoutExpired):
            raise GbError(f"--executor slurm: the Slurm controller does not answer (`sinfo -h` still waiting "
                          f"after {timeout:g} s)") from None
        raise
    if proc.returncode != 0:
        why = _one_line(err) or f"exit code {proc.returncode}"
        raise GbError(f"--executor slurm: the Slurm controller does not answer (`sinfo -h` failed: {why})")


class SlurmTask(submitit.helpers.Checkpointable):
    """One array task: `fn(*args)`. Checkpointable: on a time-out or a preemption (submitit's
    signal, `--signal=USR2@signal_delay_s`) submitit calls `checkpoint`, which resubmits the same
    call, and requeues the task (at most `max_num_timeout` times for time-outs); its points then
    resume from what their directories hold (a finished stage is not redone). A module-level
    class, so that the job unpickles it by reference."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
        dirs = args[1] if len(args) > 1 and isinstance(args[1], list) else []
        job = os.environ.get("SLURM_ARRAY_JOB_ID", os.environ.get("SLURM_JOB_ID", "?"))
        task = os.environ.get("SLURM_ARRAY_TASK_ID")
        for d in map(Path, dirs):   # a line in each unfinished point's log (best effort)
            if d.is_dir() and not (d / "tables" / "errors.csv").is_file():
                try:
                    with open(d / "log.txt", "a", encoding="utf-8") as log:
                        log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} Slurm task {job}"
                                  f"{'_' + task if task else ''} stopped (time limit or preemption): "
                                  f"requeued, resumes from this directory\n")
                except OSError:
                    pass
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def slurm_parameters(opts: dict, jobs: int, name: str = "sweep") -> dict:
    """submitit `SlurmExecutor` parameters from the sweep options (`slurm_options`): gb's own, then
    `sweep.slurm`, each as submitit's parameter when it has one, else as an #SBATCH line
    (`additional_parameters`); false leaves an option out."""
    mem = float(opts["mem_gb"])
    params: dict = {"job_name": f"gb-{name}", "time": int(opts["time_min"]), "cpus_per_task": int(opts["cpus"]),
                    "mem": f"{int(mem)}G" if mem == int(mem) else f"{max(1, round(mem * 1024))}M",
                    "array_parallelism": int(jobs),
                    # the USR2 that lets submitit checkpoint and requeue a task comes this long before its
                    # time limit: submitit's 90 s, less for short limits (a quarter of it)
                    "signal_delay_s": min(90, max(10, int(opts["time_min"]) * 15))}
    for key in ("partition", "account", "qos", "constraint"):
        if opts.get(key):
            params[key] = opts[key]
    if opts.get("gpus"):
        params["gres"] = f"gpu:{int(opts['gpus'])}"
    known = submitit.SlurmExecutor._valid_parameters()
    extra: dict = {}
    for key, value in (opts.get("slurm") or {}).items():
        if value is False:
            continue
        key = key.replace("-", "_")
        if key in known:
            params[key] = value
        else:
            extra[key] = value   # submitit writes `#SBATCH --key=value` (`_` as `-`), or `--key` for true
    if extra:
        params["additional_parameters"] = extra
    return params


def _one_line(text: str | None) -> str:
    """The lines of a command's message as one (sbatch's "Try sbatch --help" left out)."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip() and not ln.strip().startswith("Try ")]
    lines = lines[:1] + [ln.removeprefix("sbatch: error: ") for ln in lines[1:]]
    return "; ".join(dict.fromkeys(lines))


def _refusal(exc: BaseException, opts: dict) -> str:
    """One line for a submission that sbatch refused, naming the sweep key at fault when its
    message tells which (a partition, account, qos, feature, gres, time, memory or sbatch option)."""
    text = getattr(exc, "stderr", None) or getattr(exc, "output", None) or str(exc)
    msg = shorten(_one_line(text if isinstance(text, str) else text.decode(errors="replace"))
                  or type(exc).__name__, 400)
    low = msg.lower()
    extra = {k.replace("-", "_"): (k, v) for k, v in (opts.get("slurm") or {}).items()}
    unknown = re.search(r"unrecognized option '--([a-z0-9_-]+)", low)
    key = value = None
    if unknown and unknown.group(1).replace("-", "_") in extra:
        key, value = extra[unknown.group(1).replace("-", "_")]
        key = f"slurm.{key}"
    else:
        # account and qos first: their messages may name the partition too ("account/partition combination")
        rules = [("account", ("account",)), ("qos", ("qos",)), ("constraint", ("feature", "constraint")),
                 ("gpus", ("gres", "gpu")), ("time_min", ("time limit",)), ("mem_gb", ("memory",)),
                 ("cpus", ("cpu", "processor")), ("partition", ("partition",))]
        for k, words in rules:   # the first that the message names decides (unset: no key to name)
            if any(w in low for w in words):
                if opts.get(k):
                    key, value = k, (f"gpu:{opts[k]}" if k == "gpus" else opts[k])
                break
        else:
            hints = {"exclude": ("node name",), "nodelist": ("node name",), "reservation": ("reservation",)}
            for name, (k, v) in extra.items():
                if any(w in low for w in hints.get(name, ())) or name.replace("_", "-") in low:
                    key, value = f"slurm.{k}", v
                    break
    if key is None:
        return f"--executor slurm: Slurm refused the job array: {msg}"
    return f"sweep.{key}: Slurm refused {value!r}: {msg}"


def _submit(ex, fn: Callable, tasks: list[tuple], opts: dict, folder: Path) -> list:
    """`ex.map_array` (one sbatch call); a refusal becomes one GbError line, and the files
    submitit wrote for the refused array (pickles, the sbatch script) are removed."""
    def files() -> set:
        return set(folder.iterdir()) if folder.is_dir() else set()

    existed, before = folder.exists(), files()
    try:
        with contextlib.redirect_stderr(io.StringIO()):   # submitit prints sbatch's complaint itself
            return ex.map_array(fn, *map(list, zip(*tasks)))
    except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError,
            subprocess.SubprocessError, OSError) as exc:
        for p in files() - before:
            try:
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
            except OSError:
                pass
        if not existed:
            with contextlib.suppress(OSError):
                folder.rmdir()   # only when empty
        raise GbError(_refusal(exc, opts)) from None


def run_slurm(fn: Callable, tasks: list[tuple], jobs: int, opts: dict, out: Path, progress: bool, echo) -> None:
    """`fn(*task, cpus)` for every task as one submitit job array (`SlurmExecutor`: never a local
    fallback; `check_slurm` first); the sweep process waits and shows progress. Each task is a
    `SlurmTask`, requeued on a time-out or preemption. A task that dies (memory, node, too many
    time-outs) gets its points' failed.json, also when only `squeue` can tell (`_lost`). `opts`:
    `slurm_options`."""
    ex = submitit.SlurmExecutor(folder=out / "slurm" / "%j")
    try:
        ex.update_parameters(**slurm_parameters(opts, jobs, out.name))
    except ValueError as exc:   # submitit's own check of a parameter's value
        raise GbError(f"sweep.slurm: {str(exc).splitlines()[0]}") from None
    tasks = [(*t, opts["cpus"]) for t in tasks]
    with interrupts.deferred():   # an interrupt during sbatch waits for the job ids, to cancel them
        submitted = _submit(ex, SlurmTask(fn), tasks, opts, out / "slurm")
    array = submitted[0].job_id.split('_')[0]
    pending = dict(zip(submitted, tasks))
    gone: dict[str, tuple[float, str]] = {}   # task id -> (first seen out of the queue or ended, its state)
    next_look = time.monotonic() + QUEUE_SECONDS
    try:
        echo(f"submitted Slurm array {array} ({len(submitted)} tasks)")
        with _Progress(sum(len(t[1]) for t in tasks), progress, echo) as bar:
            while pending:
                for job in [j for j in pending if j.done()]:
                    task = pending.pop(job)
                    try:
                        results = job.result()
                    except Exception as exc:  # the task died (time limit, memory, node): record it
                        results = _died(task[1], "slurm", str(job.paths.stderr),
                                        f"Slurm task {job.job_id}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                    for result, d in zip(results, task[1]):
                        bar.finished(result, Path(d).name)
                if pending and time.monotonic() >= next_look:
                    next_look = time.monotonic() + QUEUE_SECONDS
                    for job, state in _lost(array, pending, gone):
                        task = pending.pop(job)
                        results = _died(task[1], "slurm", str(job.paths.stderr),
                                        f"Slurm task {job.job_id} {state} without a result for {GONE_SECONDS} s "
                                        "(squeue; with accounting off, sacct cannot say why: out of memory, "
                                        "a lost node or a cancel)")
                        for result, d in zip(results, task[1]):
                            bar.finished(result, Path(d).name)
                bar.running(sum(len(t[1]) for t in pending.values()))
                if pending:
                    time.sleep(1)
    except BaseException as exc:   # interrupted: cancel the array (best effort), record the running points
        started = {str(Path(d)) for job, t in pending.items() if _slurm_state(job) != "PENDING" for d in t[1]}
        note = _cancel_array(array)
        _stopped([d for t in pending.values() for d in t[1]], exc, started.__contains__)
        if isinstance(exc, interrupts.Interrupted):
            exc.notes.append(note)
        else:
            echo(note)
        raise


def _lost(array: str, pending: dict, gone: dict) -> list[tuple]:
    """The unfinished tasks that left the queue, or ended, at least GONE_SECONDS ago without a
    result: (job, how). submitit learns that a task ended from `sacct`, so without accounting (as on
    this single-node cluster) a task killed before it wrote its result (out of memory, a lost node,
    `scancel`) would keep the sweep waiting for ever; `squeue` still answers. When it does not
    answer, nothing is concluded. `gone` carries the first sighting between calls."""
    try:
        proc = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-j", array, "-o", "%i %T"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    if proc.returncode != 0 and "Invalid job id" not in proc.stderr:   # the controller did not answer
        return []
    states = dict(line.split()[:2] for line in proc.stdout.splitlines() if len(line.split()) >= 2)
    now, lost = time.monotonic(), []
    for job in pending:
        state = states.get(job.job_id)
        if state is not None and state.upper() not in ENDED:
            gone.pop(job.job_id, None)   # queued, running or requeued: still coming
            continue
        how = "left the queue" if state is None else f"ended {state.upper()}"
        first, _ = gone.setdefault(job.job_id, (now, how))
        if now - first >= GONE_SECONDS and not job.done():
            lost.append((job, how))
    return lost


def _slurm_state(job) -> str:
    """A job's last known state (submitit's cache: no Slurm call); UNKNOWN when there is none."""
    try:
        return str(job.watcher.get_state(job.job_id, mode="cache")).upper()
    except Exception:
        return "UNKNOWN"


def _cancel_array(array: str) -> str:
    """`scancel` the whole job array (its pending and running tasks) in one call, its output kept
    off the terminal (scancel complains about tasks that finished); what happened, for the user."""
    try:
        proc = subprocess.run(["scancel", array], capture_output=True, text=True, timeout=30)
        if proc.returncode == 0:
            return f"Slurm array {array} cancelled"
        why = (proc.stderr or proc.stdout).strip().splitlines()[0] if (proc.stderr or proc.stdout).strip() else \
            f"exit code {proc.returncode}"
    except (OSError, subprocess.SubprocessError) as exc:
        why = f"{type(exc).__name__}: {exc}"
    return f"Slurm array {array} may still run (scancel failed: {why}; run `scancel {array}`)"


class _Progress:
    """Points done / failed / running and an ETA. On a terminal, a rich bar; with output to a file
    (a Slurm log, nohup, CI), a plain line about every `LINE_SECONDS` or `LINE_FRACTION` of the
    points, and a last one; with `-q` (not `show`), only the failures. A failed point is always
    named on its own line."""

    def __init__(self, total: int, show: bool, echo):
        self.total, self.show, self.echo = max(int(total), 1), show, echo
        self.count = self.failed = 0
        self.bar = None
        self.start = self.last_line = time.perf_counter()
        self.last_fraction = 0.0

    def __enter__(self):
        if self.show and sys.stderr.isatty():
            self.bar = Progress(TextColumn("points"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("failed {task.fields[failed]}, running {task.fields[running]}"),
                                TextColumn("ETA"), TimeRemainingColumn())
            self.bar.__enter__()
            self.task = self.bar.add_task("sweep", total=self.total, failed=0, running=0)
        elif self.show:
            self.echo(f"sweep: {self.total} points to run")
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def running(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, running=n)

    def finished(self, result: dict, pid: str) -> None:
        self.count += 1
        self.failed += result["status"] != "done"
        if self.bar is not None:
            self.bar.update(self.task, advance=1, failed=self.failed)
        if result["status"] != "done":
            self.echo(f"point {pid} FAILED at {result['stage']}: {result['message']} (log: {result['log']})")
        if self.bar is None and self.show:
            now, fraction = time.perf_counter(), self.count / self.total
            if now - self.last_line >= LINE_SECONDS or fraction - self.last_fraction >= LINE_FRACTION \
                    or self.count == self.total:
                self._line()

    def _line(self) -> None:
        now = time.perf_counter()
        elapsed, fraction = now - self.start, min(self.count / self.total, 1.0)
        eta = f", ETA {clock(elapsed * (1 - fraction) / fraction)}" if 0 < fraction < 1 else ""
        self.echo(f"sweep: {self.count}/{self.total} points ({100 * fraction:.0f}%), {self.failed} failed, "
                  f"elapsed {clock(elapsed)}{eta}")
        self.last_line, self.last_fraction = now, fraction
