"""The Slurm executor: one submitit job array (never a local fallback), each task requeued on a time-out or
preemption; a task that dies gets its points' failed.json, also when only `squeue` can tell (`_lost`)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import signal
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
    """`fn(*task, cpus)` for every task as one job array; submitit's files go to OUT/slurm/ (not gb's)."""

    def __init__(self, jobs: int, opts: dict, out: Path, echo=print):
        super().__init__(jobs, echo)
        self.opts, self.out = opts, Path(out)
        self.array = self.job_name = ""
        self.gone: dict[str, tuple[float, str]] = {}   # task id -> (first seen out of the queue or ended, its state)
        self.lost: dict = {}                           # handle -> why it counts as dead
        self.next_look = 0.0

    def check(self) -> None:
        """Refuse (GbError): a control character in --out, a client command not on PATH, no answer to `sinfo -h`."""
        # the job script names the sweep directory (#SBATCH --output): a newline would start a script line
        bad = next((c for c in str(self.out.absolute()) if ord(c) < 32 or ord(c) == 127), None)
        if bad is not None:
            raise GbError(f"--out: {shorten(repr(str(self.out)), 200)} holds a control character ({bad!r}); a Slurm "
                          f"job script names it, so gb refuses it (use another --out)")
        if (tool := next((t for t in SLURM_TOOLS if not shutil.which(t)), None)) is not None:
            raise GbError(f"--executor slurm: no `{tool}` on PATH (gb needs the Slurm client commands "
                          f"{', '.join(SLURM_TOOLS)}; scripts/slurm-cluster.sh start brings up a single-node cluster)")
        try:
            proc = subprocess.Popen(["sinfo", "-h"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
        except OSError as exc:
            raise GbError(f"--executor slurm: `sinfo` cannot run: {exc.strerror or exc}") from None
        try:
            _, err = proc.communicate(timeout=SINFO_SECONDS)
        except BaseException as exc:   # a controller that hangs (or an interrupt): end sinfo and what it started
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                os.killpg(proc.pid, 9)
                proc.wait(timeout=5)
            if isinstance(exc, subprocess.TimeoutExpired):
                raise GbError(f"--executor slurm: the Slurm controller does not answer (`sinfo -h` still waiting "
                              f"after {SINFO_SECONDS:g} s)") from None
            raise
        if proc.returncode != 0:
            why = _one_line(err) or f"exit code {proc.returncode}"
            raise GbError(f"--executor slurm: the Slurm controller does not answer (`sinfo -h` failed: {why})")

    def submit(self, fn: Callable, tasks: list[tuple]) -> list:
        ex = submitit.SlurmExecutor(folder=self.out / layout.SLURM / "%j")
        params = slurm_parameters(self.opts, self.jobs, self.out.name)
        self.job_name = params["job_name"]
        try:
            ex.update_parameters(**params)
        except ValueError as exc:   # submitit's own check of a parameter's value
            raise GbError(f"sweep.slurm: {str(exc).splitlines()[0]}") from None
        submitted = _submit(ex, SlurmTask(fn), [(*t, self.opts["cpus"]) for t in tasks], self.opts,
                            params, self.out / layout.SLURM)
        self.array = submitted[0].job_id.split("_")[0]
        self.next_look = time.monotonic() + QUEUE_SECONDS
        self.echo(f"submitted Slurm array {self.array} ({len(submitted)} tasks)")
        return submitted

    def wait(self, pending: list, timeout: float) -> list:
        end = time.monotonic() + timeout
        while True:
            # a result file says a task ended; submitit's `done()` would ask `sacct`, which complains at
            # every poll where accounting is off: tasks that die without a result are found by `_lost`
            finished = [j for j in pending if j.paths.result_pickle.exists()]
            if time.monotonic() >= self.next_look:
                self.next_look = time.monotonic() + QUEUE_SECONDS
                for job, how in _lost(self.job_name, [j for j in pending if j not in finished], self.gone):
                    self.lost[job] = how
                    finished.append(job)
            if finished or time.monotonic() >= end:
                return finished
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))

    def result(self, handle, task: tuple) -> list[dict]:
        if handle in self.lost:
            why = (f" {self.lost[handle]} without a result for {GONE_SECONDS} s (squeue; with accounting off, sacct "
                   "cannot say why: out of memory, a lost node or a cancel)")
        else:
            try:
                return handle.result()
            except Exception as exc:  # the task died (time limit, memory, node): record it
                why = f": {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return died(task[1], "slurm", str(handle.paths.stderr), f"Slurm task {handle.job_id}{why}")

    def running(self, pending: list, tasks: dict) -> int:
        return sum(len(tasks[j][1]) for j in pending)   # queued or running: the array's own parallelism decides

    def cancel(self, pending: list, tasks: dict):
        started = {str(Path(d)) for job in pending if _slurm_state(job) != "PENDING" for d in tasks[job][1]}
        note = _cancel_array(self.array) if self.array else ""
        return started.__contains__, note


class SlurmTask(submitit.helpers.Checkpointable):
    """One array task, `fn(*args)`, requeued by `checkpoint` on a time-out or preemption (points resume)."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, *args):
        # `scancel` and `scontrol requeue` send SIGTERM, then SIGKILL: the training saves its checkpoint now
        interrupts.checkpoint_on(signal.SIGTERM)
        return self.fn(*args)

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
        dirs = args[1] if len(args) > 1 and isinstance(args[1], list) else []
        job = os.environ.get("SLURM_ARRAY_JOB_ID", os.environ.get("SLURM_JOB_ID", "?"))
        task = os.environ.get("SLURM_ARRAY_TASK_ID")
        for d in map(Path, dirs):   # a line in each unfinished point's log (best effort)
            if is_dir(d) and point_state(d) != PointState.DONE:
                with contextlib.suppress(OSError), open_append(RunDir(d).log) as log:
                    log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} Slurm task {job}"
                              f"{'_' + task if task else ''} stopped (time limit or preemption): "
                              f"requeued, resumes from this directory\n")
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def slurm_parameters(opts: dict, jobs: int, name: str = "sweep") -> dict:
    """submitit's parameters from the sweep options, then `sweep.slurm` (else #SBATCH lines; false: left out)."""
    mem = float(opts["mem_gb"])
    params: dict = {"job_name": "gb-" + (re.sub(r"[^A-Za-z0-9._-]", "_", name) or "sweep"),
                    "time": int(opts["time_min"]), "cpus_per_task": int(opts["cpus"]),
                    "mem": f"{int(mem)}G" if mem == int(mem) else f"{max(1, round(mem * 1024))}M",
                    "array_parallelism": int(jobs),
                    # the USR2 to checkpoint and requeue, before the time limit: 90 s, less for short limits
                    "signal_delay_s": min(90, max(10, int(opts["time_min"]) * 15))}
    params.update({k: opts[k] for k in ("partition", "account", "qos", "constraint") if opts.get(k)})
    if opts.get("gpus"):
        params["gres"] = f"gpu:{int(opts['gpus'])}"
    known = submitit.SlurmExecutor._valid_parameters()
    extra: dict = {}
    for key, value in (opts.get("slurm") or {}).items():
        key = key.replace("-", "_")
        if value is not False:   # unknown to submitit: `#SBATCH --key=value` (`_` as `-`), or `--key` for true
            (params if key in known else extra)[key] = value
    if extra:
        params["additional_parameters"] = extra
    return params


def _one_line(text: str | None) -> str:
    """The lines of a command's message as one (sbatch's "Try sbatch --help" left out)."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip() and not ln.strip().startswith("Try ")]
    lines = lines[:1] + [ln.removeprefix("sbatch: error: ") for ln in lines[1:]]
    return "; ".join(dict.fromkeys(lines))


# submitit's parameters that are no sbatch option (the job script's own lines); the others: `--key=value`, `--key`
NOT_SBATCH = ("array_parallelism", "signal_delay_s", "setup", "srun_args", "use_srun", "stderr_to_stdout", "map_count",
              "additional_parameters")


def _at_fault(opts: dict, params: dict) -> tuple[str, object] | None:
    """(sweep key, value) whose removal alone lets `sbatch --test-only` accept the job: the controller's exit code
    decides, never its words. None when the whole job passes that test or no one key is at fault."""
    flat = {k: v for k, v in params.items() if k not in NOT_SBATCH} | (params.get("additional_parameters") or {})
    flags = {k: f"--{k.replace('_', '-')}" + ("" if v is True else f"={v}") for k, v in flat.items()}
    keys = [(k, p, f"gpu:{opts[k]}" if k == "gpus" else opts[k]) for k, p in
            (("account", "account"), ("qos", "qos"), ("constraint", "constraint"), ("gpus", "gres"),
             ("time_min", "time"), ("mem_gb", "mem"), ("cpus", "cpus_per_task"), ("partition", "partition"))
            if opts.get(k) and p in flags]
    keys += [(f"slurm.{k}", k.replace("-", "_"), v) for k, v in (opts.get("slurm") or {}).items()
             if k.replace("-", "_") in flags]

    def accepted(without: str | None) -> bool:
        argv = [f for k, f in flags.items() if k != without]
        proc = subprocess.run(["sbatch", "--test-only", "--wrap=true", "--output=/dev/null", *argv],
                              capture_output=True, timeout=30)
        return proc.returncode == 0

    try:
        if accepted(None):
            return None   # refused for another reason than a value (the array, the submission itself)
        return next(((k, v) for k, p, v in keys if accepted(p)), None)
    except (OSError, subprocess.SubprocessError):
        return None


def _submit(ex, fn: Callable, tasks: list[tuple], opts: dict, params: dict, folder: Path) -> list:
    """`ex.map_array` (one sbatch call); a refusal: submitit's files for it removed, one GbError line naming the
    sweep key at fault when `_at_fault` finds it."""
    def files() -> set:
        return set(folder.iterdir()) if folder.is_dir() else set()

    existed, before = folder.exists(), files()
    try:
        with contextlib.redirect_stderr(io.StringIO()):   # submitit prints sbatch's complaint itself
            return ex.map_array(fn, *map(list, zip(*tasks)))
    except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError,
            subprocess.SubprocessError, OSError) as exc:
        for p in files() - before:
            with contextlib.suppress(OSError):
                remove(p)
        if not existed:
            with contextlib.suppress(OSError):
                folder.rmdir()   # only when empty
        text = getattr(exc, "stderr", None) or getattr(exc, "output", None) or str(exc)
        why = shorten(_one_line(text if isinstance(text, str) else text.decode(errors="replace"))
                      or type(exc).__name__, 400)
        fault = _at_fault(opts, params)
        raise GbError(f"--executor slurm: Slurm refused the job array: {why}" if fault is None
                      else f"sweep.{fault[0]}: Slurm refused {fault[1]!r}: {why}") from None


def _lost(job_name: str, pending: dict, gone: dict) -> list[tuple]:
    """(job, how) of the unfinished tasks out of `squeue` or ended GONE_SECONDS ago without a result: without
    accounting, a killed task would keep the sweep waiting for ever. `gone` keeps first sightings."""
    try:
        # by the array's job name: an empty listing once its tasks are gone, an exit code only when the
        # controller did not answer (`-j` fails alike for both)
        proc = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-n", job_name, "-o", "%i %T"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    if proc.returncode != 0:
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
    """`scancel` the whole job array (its complaints kept off the terminal); what happened, for the user."""
    try:
        proc = subprocess.run(["scancel", array], capture_output=True, text=True, timeout=30)
        if proc.returncode == 0:
            return f"Slurm array {array} cancelled"
        why = (proc.stderr or proc.stdout).strip().splitlines()[0] if (proc.stderr or proc.stdout).strip() else \
            f"exit code {proc.returncode}"
    except (OSError, subprocess.SubprocessError) as exc:
        why = f"{type(exc).__name__}: {exc}"
    return f"Slurm array {array} may still run (scancel failed: {why}; run `scancel {array}`)"


