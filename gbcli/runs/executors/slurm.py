"""The Slurm executor: one submitit job array (`SlurmExecutor`: never a local fallback; `check`
first), each task a `SlurmTask` requeued on a time-out or preemption. A task that dies (memory,
node, too many time-outs) gets its points' failed.json, also when only `squeue` can tell (`_lost`).
Its options come from the config alone (`sweep.*` and the `sweep.slurm` pass-through)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

import submitit

from gbcli import interrupts
from gbcli.errors import GbError
from gbcli.runs.executors.base import Executor, died
from gbcli.fs import layout
from gbcli.fs.layout import RunDir
from gbcli.fs.safe import is_dir, open_append, remove
from gbcli.store.records import PointState, point_state
from gbcli.text import shorten

SINFO_SECONDS = 10   # how long the Slurm controller gets to answer `sinfo -h`
SLURM_TOOLS = ("sbatch", "srun", "sinfo")   # srun: submitit starts each task with it
QUEUE_SECONDS = 15   # how often the sweep asks `squeue` whether its unfinished tasks are still there
GONE_SECONDS = 30    # how long a task may be out of the queue (or ended) without a result before it counts as dead
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
                   "DEADLINE", "SPECIAL_EXIT", "REVOKED"})   # squeue's states of a task that will not run again


class SlurmArray(Executor):
    """`fn(*task, cpus)` for every task as one job array; `opts`: the sweep section (`SweepConfig`
    dumped), `out`: the sweep directory (submitit's files go to OUT/slurm/, which gb does not own)."""

    name = "slurm"

    def __init__(self, jobs: int, opts: dict, out: Path, echo=print):
        super().__init__(jobs, echo)
        self.opts, self.out = opts, Path(out)
        self.array = ""
        self.gone: dict[str, tuple[float, str]] = {}   # task id -> (first seen out of the queue or ended, its state)
        self.lost: dict = {}                           # handle -> why it counts as dead
        self.next_look = 0.0

    def check(self) -> None:
        # the sweep directory is written into the job script (#SBATCH --output/--error lines): a
        # newline in it would end the comment and run the rest of the name as a line of the script
        bad = next((c for c in str(self.out.absolute()) if ord(c) < 32 or ord(c) == 127), None)
        if bad is not None:
            raise GbError(f"--out: {shorten(repr(str(self.out)), 200)} holds a control character ({bad!r}); a Slurm "
                          f"job script names it, so gb refuses it (use another --out)")
        check_slurm()

    def submit(self, fn: Callable, tasks: list[tuple]) -> list:
        ex = submitit.SlurmExecutor(folder=self.out / layout.SLURM / "%j")
        try:
            ex.update_parameters(**slurm_parameters(self.opts, self.jobs, self.out.name))
        except ValueError as exc:   # submitit's own check of a parameter's value
            raise GbError(f"sweep.slurm: {str(exc).splitlines()[0]}") from None
        submitted = _submit(ex, SlurmTask(fn), [(*t, self.opts["cpus"]) for t in tasks], self.opts,
                            self.out / layout.SLURM)
        self.array = submitted[0].job_id.split("_")[0]
        self.next_look = time.monotonic() + QUEUE_SECONDS
        self.echo(f"submitted Slurm array {self.array} ({len(submitted)} tasks)")
        return submitted

    def wait(self, pending: list, timeout: float) -> list:
        end = time.monotonic() + timeout
        while True:
            # a task's result file says it ended (its records, or its error); submitit's own `done()`
            # would ask `sacct`, which prints a complaint at every poll where accounting is off: the
            # tasks that die without a result are found through `squeue` instead (`_lost`)
            finished = [j for j in pending if j.paths.result_pickle.exists()]
            if time.monotonic() >= self.next_look:
                self.next_look = time.monotonic() + QUEUE_SECONDS
                for job, how in _lost(self.array, [j for j in pending if j not in finished], self.gone):
                    self.lost[job] = how
                    finished.append(job)
            if finished or time.monotonic() >= end:
                return finished
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))

    def result(self, handle, task: tuple) -> list[dict]:
        if handle in self.lost:
            return died(task[1], "slurm", str(handle.paths.stderr),
                        f"Slurm task {handle.job_id} {self.lost[handle]} without a result for {GONE_SECONDS} s "
                        "(squeue; with accounting off, sacct cannot say why: out of memory, a lost node or a cancel)")
        try:
            return handle.result()
        except Exception as exc:  # the task died (time limit, memory, node): record it
            return died(task[1], "slurm", str(handle.paths.stderr),
                        f"Slurm task {handle.job_id}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")

    def running(self, pending: list, tasks: dict) -> int:
        return sum(len(tasks[j][1]) for j in pending)   # queued or running: the array's own parallelism decides

    def cancel(self, pending: list, tasks: dict):
        started = {str(Path(d)) for job in pending if _slurm_state(job) != "PENDING" for d in tasks[job][1]}
        note = _cancel_array(self.array) if self.array else ""
        return started.__contains__, note


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
        import signal

        # `scancel` (a cancelled sweep) and `scontrol requeue` send SIGTERM, then SIGKILL after
        # KillWait: the running training saves its checkpoint at once, and a rerun resumes there
        interrupts.checkpoint_on(signal.SIGTERM)
        return self.fn(*args)

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
        dirs = args[1] if len(args) > 1 and isinstance(args[1], list) else []
        job = os.environ.get("SLURM_ARRAY_JOB_ID", os.environ.get("SLURM_JOB_ID", "?"))
        task = os.environ.get("SLURM_ARRAY_TASK_ID")
        for d in map(Path, dirs):   # a line in each unfinished point's log (best effort)
            if is_dir(d) and point_state(d) != PointState.DONE:
                try:
                    with open_append(RunDir(d).log) as log:
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
    params: dict = {"job_name": "gb-" + (re.sub(r"[^A-Za-z0-9._-]", "_", name) or "sweep"), "time": int(opts["time_min"]), "cpus_per_task": int(opts["cpus"]),
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
                remove(p)
            except OSError:
                pass
        if not existed:
            with contextlib.suppress(OSError):
                folder.rmdir()   # only when empty
        raise GbError(_refusal(exc, opts)) from None


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


