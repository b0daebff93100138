"""gb sweep --executor slurm: refused before anything runs when the Slurm commands or the controller
are missing (no cluster needed: fake commands on PATH); on a real cluster, the sweep's Slurm options
reaching the job, a submission Slurm refuses told in one line naming the key, and a task stopped by
its time-limit signal requeued by submitit and resumed."""

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import submitit
import torch

from test_sweep import gb, slurm_answers, write


def fake_commands(tmp_path: Path, **scripts: str) -> Path:
    """A directory holding only the given commands (shell scripts), to be the whole PATH."""
    d = tmp_path / "fakebin"
    d.mkdir()
    for name, body in scripts.items():
        (d / name).write_text(f"#!/bin/sh\n{body}\n")
        (d / name).chmod(0o755)
    return d


def refused(proc: subprocess.CompletedProcess) -> str:
    """The one line of a refusal (exit code 2, no traceback, nothing submitted)."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "submitted" not in proc.stdout
    return lines[0]


def no_point_ran(tmp_path: Path) -> None:
    assert not [p for p in tmp_path.glob("runs/*/points/*/*") if p.name != "log.txt"]
    assert not list(tmp_path.glob("runs/*/slurm/**/*.pkl"))


@pytest.mark.parametrize("missing", ["srun", "sbatch", "sinfo"])
def test_a_missing_slurm_command_is_refused_before_anything_runs(tmp_path, missing):
    """No silent local fallback: without `srun` submitit's AutoExecutor ran the points here."""
    called = tmp_path / "called"
    commands = {"sbatch": f": > {called}; echo 'Submitted batch job 1'", "srun": f": > {called}",
                "sinfo": "echo 'debug* up infinite 1 idle vm'"}
    del commands[missing]
    path = write(tmp_path, {"contexts.seed": [1, 2]}, name="nocmd")
    proc = gb(tmp_path, "sweep", str(path), "--executor", "slurm",
              env={**os.environ, "PATH": str(fake_commands(tmp_path, **commands))}, timeout=300)
    assert refused(proc).startswith(f"gb: error: --executor slurm: no `{missing}` on PATH")
    assert not called.exists()
    no_point_ran(tmp_path)


@pytest.mark.slow
def test_a_controller_that_hangs_is_refused_within_the_timeout(tmp_path):
    from gbcli.runs.executors.slurm import SINFO_SECONDS

    marker = f"{600 + uuid.uuid4().int % 1000}.{os.getpid()}"   # the fake sinfo's sleep, found again below
    bin_ = fake_commands(tmp_path, sbatch="echo 'Submitted batch job 1'", srun="exit 0",
                         sinfo=f"/bin/sleep {marker}\nexit 0")
    path = write(tmp_path, {"contexts.seed": [1, 2]}, name="hang")
    start = time.monotonic()
    proc = gb(tmp_path, "sweep", str(path), "--executor", "slurm", env={**os.environ, "PATH": str(bin_)},
              timeout=SINFO_SECONDS + 120)
    elapsed = time.monotonic() - start
    line = refused(proc)
    assert line.startswith("gb: error: --executor slurm: the Slurm controller does not answer") and \
        f"after {SINFO_SECONDS} s" in line
    assert elapsed < SINFO_SECONDS + 60   # gb's own start (torch) takes seconds on a busy machine
    # the hung command and what it started are ended, not left behind
    assert subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True).returncode == 1
    no_point_ran(tmp_path)


def test_a_bad_sweep_slurm_option_is_refused_by_the_config(tmp_path):
    path = write(tmp_path, {"contexts.seed": [1, 2]}, name="badopt", sweep={"slurm": {"part": "debug"}})
    line = refused(gb(tmp_path, "sweep", str(path), "--executor", "slurm", timeout=300))
    assert "sweep.slurm" in line and "'part': gb sets partition itself (use sweep.partition)" in line
    path = write(tmp_path, {"contexts.seed": [1, 2]}, name="badval", sweep={"slurm": {"nice": 1.5}})
    line = refused(gb(tmp_path, "sweep", str(path), "--executor", "slurm", timeout=300))
    assert "sweep.slurm" in line and "'nice': 1.5 is not a string, integer or boolean" in line
    path = write(tmp_path, {"contexts.seed": [1, 2]}, name="badacct")
    line = refused(gb(tmp_path, "sweep", str(path), "--executor", "slurm", "--set", "sweep.account=a\nb", timeout=300))
    assert "sweep.account: " in line and line.startswith("gb: error: ")
    no_point_ran(tmp_path)


# ------------------------------------------------------------------ a real cluster


def need_slurm() -> None:
    why = slurm_answers()
    if why:
        pytest.skip(why)


def scontrol(job: str) -> str:
    return subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, timeout=30).stdout


@pytest.mark.slurm
@pytest.mark.slow
def test_the_sweeps_slurm_options_reach_the_job(tmp_path):
    """What this single-node cluster accepts (accounting is off: any account and qos pass)."""
    need_slurm()
    name = f"opts{uuid.uuid4().hex[:6]}"
    path = write(tmp_path, {"contexts.seed": [1, 2]}, name=name,
                 sweep={"batch": 1, "slurm": {"nice": 10, "comment": "gb-options-test", "exclusive": False}})
    proc = gb(tmp_path, "sweep", str(path), "--executor", "slurm", "--jobs", "2", "--set", "sweep.account=acme", "--set",
              "sweep.qos=normal", "--set", "sweep.time_min=10", "--set", "sweep.mem_gb=2", "-q", timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    array = re.search(r"submitted Slurm array (\d+) \(2 tasks\)", proc.stdout).group(1)
    script = next((tmp_path / "runs" / name / "slurm").rglob(f"{array}_*submission.sh")).read_text()
    for line in ("--account=acme", "--qos=normal", "--nice=10", "--comment=gb-options-test", f"--job-name=gb-{name}",
                 "--time=10", "--mem=2G", "--cpus-per-task=1", "--array=0-1%2", "--signal=USR2@90"):
        assert f"#SBATCH {line}\n" in script, script
    assert "exclusive" not in script and "gres" not in script
    shown = scontrol(array)   # the controller's own record (kept MinJobAge seconds; no QOS without accounting)
    for field in ("Account=acme", "Nice=10", "Comment=gb-options-test", f"JobName=gb-{name}",
                  "TimeLimit=00:10:00"):
        assert field in shown, shown
    assert len(list((tmp_path / "runs" / name / "points").glob("*/tables/errors.csv"))) == 2


@pytest.mark.slurm
@pytest.mark.parametrize("option, sweep, key", [
    (["--set", "sweep.partition=nope"], {}, "sweep.partition: Slurm refused 'nope': sbatch: error: invalid partition"),
    (["--set", "sweep.constraint=nosuchfeature"], {}, "sweep.constraint: Slurm refused 'nosuchfeature': "),
    ([], {"slurm": {"frobnicate": 1}}, "sweep.slurm.frobnicate: Slurm refused 1: sbatch: unrecognized option"),
])
def test_a_submission_slurm_refuses_is_one_line_naming_the_key(tmp_path, option, sweep, key):
    need_slurm()
    name = f"refused{uuid.uuid4().hex[:6]}"
    path = write(tmp_path, {"contexts.seed": [1, 2]}, name=name, sweep=sweep)
    proc = gb(tmp_path, "sweep", str(path), "--executor", "slurm", *option, "-q", timeout=300)
    assert refused(proc).startswith(f"gb: error: {key}")
    no_point_ran(tmp_path)   # nothing left half-submitted: the refused array's pickles are gone too
    queue = subprocess.run(["squeue", "-h", "-n", f"gb-{name}", "-o", "%i"], capture_output=True, text=True,
                           timeout=30)
    assert queue.returncode == 0 and not queue.stdout.strip()


def training(point: Path) -> bool:
    """A sweep point's training has started and not finished (its log.txt says so)."""
    log = (point / "log.txt").read_text() if (point / "log.txt").is_file() else ""
    return "train-gd gd-gln: 150 training points" in log and "train-gd gd-gln: ok" not in log


def wait_for(condition, seconds: float, what: str, proc=None):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the sweep ended while waiting for {what}: {proc.communicate()}")
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


def sweep_task0(tmp_path: Path, name: str, proc: subprocess.Popen) -> tuple[str, Path]:
    """Task 0 of the sweep's job array (`gb-<name>`) and its point's directory, once submitted."""
    array = wait_for(lambda: subprocess.run(["squeue", "-h", "-n", f"gb-{name}", "-o", "%F"], capture_output=True,
                                            text=True).stdout.split()[:1], 300, "the job array", proc)[0]
    task = f"{array}_0"
    pickle = tmp_path / "runs" / name / "slurm" / task / f"{task}_submitted.pkl"
    wait_for(pickle.is_file, 120, "task 0's pickle", proc)
    return task, tmp_path / submitit.helpers.DelayedSubmission.load(pickle).args[1][0]   # task 0's point


def start_sweep(tmp_path: Path, path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gbcli.cli", "sweep", str(path), "--executor", "slurm", "--jobs",
                             "2", "--set", "sweep.time_min=10", "--set", "sweep.mem_gb=2", "-q"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def stop_sweep(proc: subprocess.Popen, name: str) -> None:
    """After a failed test: the sweep and its array stopped."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
        subprocess.run(["scancel", "-n", f"gb-{name}"], timeout=30)


def release_requeued(task: str, proc: subprocess.Popen) -> None:
    """Start a requeued task now instead of after its BeginTime. Slurm's hold is there for a reason:
    slurmd refuses a job whose credential was created in the same second as (or before) it revoked
    the job's previous run ("Killing non-startable batch job: Job credential revoked", the task
    then ends FAILED). So first wait until the previous run's slurmstepd is gone from this node
    (the revocation is done by then) and the clock has moved past that second."""
    job_id = re.search(r"\bJobId=(\d+)", scontrol(task)).group(1)
    wait_for(lambda: subprocess.run(["pgrep", "-f", rf"slurmstepd: \[{job_id}\."], capture_output=True).returncode == 1,
             120, "the previous run's slurmstepd to exit", proc)
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"JobId={task}", "StartTime=now"], check=True, timeout=30)


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.parametrize("how", ["signal", "requeue"])
def test_a_stopped_task_is_requeued_and_its_point_resumes(tmp_path, how):
    """signal: Slurm sends each task USR2 `signal_delay_s` before its time limit (`--signal`);
    submitit then checkpoints the task (`SlurmTask.checkpoint`) and requeues it. The signal is
    sent here while the task trains (as submitit's own `SlurmJob._interrupt(timeout=True)` does).
    requeue: an operator's (or a preemption's) `scontrol requeue`, which kills the task (after
    KillWait: submitit ignores SIGTERM) and queues it again. Either way the task runs again, its
    point resumes from its directory, and the sweep completes."""
    need_slurm()
    name = f"requeue{uuid.uuid4().hex[:6]}"
    # long enough that a task killed KillWait (10 s) after `scontrol requeue` has not finished its point
    epochs = 6000 if how == "signal" else 20000
    # a training checkpoint every second: the requeued task resumes its network from the last one
    path = write(tmp_path, {"contexts.seed": [1, 2]}, name=name, training={"epochs": epochs, "checkpoint_seconds": 1},
                 sweep={"batch": 1})
    out = tmp_path / "runs" / name
    proc = start_sweep(tmp_path, path)
    try:
        task, point = sweep_task0(tmp_path, name, proc)

        wait_for(lambda: training(point) and (point / "gd" / "checkpoint.pt").is_file(), 300,   # one to resume from
                 "task 0 to train", proc)
        command = ["scancel", "--signal=USR2", task] if how == "signal" else ["scontrol", "requeue", task]
        subprocess.run(command, check=True, timeout=30)
        # Slurm holds a requeued batch job for about two minutes (its BeginTime): release it now
        wait_for(lambda: "Restarts=1" in scontrol(task) and "JobState=PENDING" in scontrol(task), 120,
                 "the requeue", proc)
        release_requeued(task, proc)
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        stop_sweep(proc, name)
    assert proc.returncode == 0, stdout + stderr
    assert "2 of 2 points done, 0 failed" in stdout
    log = (point / "log.txt").read_text()
    assert len(re.findall(r"^--- .* pid \d+, torch threads", log, re.M)) == 2   # it ran twice
    assert (point / "tables" / "errors.csv").is_file()
    slurm_log = (out / "slurm" / task / f"{task}_0_log.out").read_text()
    assert slurm_log.count("Starting with JobEnvironment") == 2
    note = f"Slurm task {task} stopped (time limit or preemption): requeued, resumes from this directory"
    if how == "signal":
        assert note in log
        assert "Calling checkpoint method" in slurm_log and f"Requeued job {task}" in slurm_log
    else:   # killed: no checkpoint
        assert note not in log
    # the network resumed from its training checkpoint, and it is bit for bit the network of one
    # uninterrupted run of the point's own config
    summary = json.loads((point / "gd" / "summary.json").read_text())
    assert summary.get("resumed_from_step", 0) > 0, summary
    assert not (point / "gd" / "checkpoint.pt").exists()
    alone = gb(tmp_path, "train-gd", str(point / "gd" / "config.yaml"), "--out", str(tmp_path / "alone"), "-q",
               env={**os.environ, "GB_DATA_DIR": os.environ.get("GB_DATA_DIR", "")})
    assert alone.returncode == 0, alone.stdout + alone.stderr
    a = torch.load(point / "gd" / "model.pt", weights_only=True)["state_dict"]
    b = torch.load(tmp_path / "alone" / "gd" / "model.pt", weights_only=True)["state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (point / "gd" / "metrics.csv").read_bytes() == (tmp_path / "alone" / "gd" / "metrics.csv").read_bytes()


@pytest.mark.slurm
@pytest.mark.slow
def test_a_task_killed_without_a_result_fails_its_point_and_the_sweep_ends(tmp_path):
    """Accounting is off on this cluster, so submitit (which asks `sacct`) never learns that a task
    ended. A task killed while it trains, before it wrote a result (here `scancel`; out of memory or
    a lost node end a task the same way), must not keep the sweep waiting: `squeue` lists it ended
    or not at all, and after `executors.GONE_SECONDS` its point is recorded failed with the reason,
    and the sweep exits 1."""
    from gbcli.runs.executors import slurm as executors

    need_slurm()
    name = f"lost{uuid.uuid4().hex[:6]}"
    # task 0 trains far longer than the test waits, task 1 a moment (a job array of two tasks)
    path = write(tmp_path, {"training.epochs": [1000000, 2]}, name=name, sweep={"batch": 1})
    proc = start_sweep(tmp_path, path)
    try:
        task, point = sweep_task0(tmp_path, name, proc)

        wait_for(lambda: training(point), 300, "task 0 to train", proc)
        killed = time.monotonic()
        subprocess.run(["scancel", task], check=True, timeout=30)
        stdout, stderr = proc.communicate(timeout=300)
        waited = time.monotonic() - killed
    finally:
        stop_sweep(proc, name)
    assert proc.returncode == 1, stdout + stderr
    assert "1 of 2 points done, 1 failed" in stdout, stdout
    failed = json.loads((point / "failed.json").read_text())
    assert failed["status"] == "failed" and failed["stage"] == "slurm"
    assert f"Slurm task {task} " in failed["message"] and "without a result" in failed["message"], failed
    assert not (point / "tables" / "errors.csv").exists()
    # noticed by the queue check, not by a time-out of the test's own
    assert waited >= executors.GONE_SECONDS, waited


@pytest.mark.slurm
@pytest.mark.slow
def test_an_interrupted_slurm_sweep_resumes_and_plots_with_submitits_files_in_place(tmp_path):
    """Ctrl-C on a Slurm sweep cancels its array and records the running points as interrupted; the
    same command then resumes it (submitit's own files in OUT/slurm/, its job-script symlink among
    them, are left alone: gb does not own that folder) and `gb plot` draws the finished sweep."""
    need_slurm()
    name = f"resume{uuid.uuid4().hex[:6]}"
    path = write(tmp_path, {"contexts.seed": [1, 2]}, name=name, training={"epochs": 6000, "checkpoint_seconds": 1},
                 sweep={"batch": 1})
    out = tmp_path / "runs" / name
    proc = start_sweep(tmp_path, path)
    try:
        task, point = sweep_task0(tmp_path, name, proc)
        wait_for(lambda: (point / "gd" / "checkpoint.pt").is_file(), 300, "task 0 to train", proc)
        proc.send_signal(2)   # SIGINT, as Ctrl-C
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        stop_sweep(proc, name)
    assert proc.returncode == 130, stdout + stderr
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr
    assert json.loads((point / "failed.json").read_text())["status"] == "interrupted"
    links = [p for p in (out / "slurm").rglob("*") if p.is_symlink()]
    assert links, sorted(p.name for p in (out / "slurm").rglob("*"))   # submitit's job-script link
    again = start_sweep(tmp_path, path)
    try:
        stdout, stderr = again.communicate(timeout=900)
    finally:
        stop_sweep(again, name)
    assert again.returncode == 0, stdout + stderr
    assert "2 of 2 points done, 0 failed" in stdout
    assert all(p.is_symlink() for p in links)   # left where submitit put them
    plot = gb(tmp_path, "plot", str(out))
    assert plot.returncode == 0, plot.stdout + plot.stderr
    assert (out / "figures" / "curves.png").is_file()


@pytest.mark.slurm
@pytest.mark.slow
def test_a_cancelled_slurm_sweep_checkpoints_its_running_training_first(tmp_path):
    """Issue 35: Ctrl-C on a Slurm sweep cancels its array; Slurm's SIGTERM (KillWait before the
    SIGKILL) makes each running training save its checkpoint at once, so the rerun resumes where it
    stopped, not from a periodic checkpoint minutes old (here there is none: one an hour)."""
    need_slurm()
    name = f"cancel{uuid.uuid4().hex[:6]}"
    # long enough that a task still trains KillWait (10 s) after the SIGTERM (it trains on: a finished
    # point would be kept, which is fine, but then there is nothing to resume)
    path = write(tmp_path, {"contexts.seed": [1, 2]}, name=name, training={"epochs": 20000, "checkpoint_seconds": 3600},
                 sweep={"batch": 1})
    proc = start_sweep(tmp_path, path)
    try:
        task, point = sweep_task0(tmp_path, name, proc)

        wait_for(lambda: training(point), 300, "task 0 to train", proc)
        time.sleep(2)   # some steps in
        assert not (point / "gd" / "checkpoint.pt").exists()   # no periodic one yet
        proc.send_signal(2)   # SIGINT, as Ctrl-C
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        stop_sweep(proc, name)
    assert proc.returncode == 130, stdout + stderr
    wait_for(lambda: (point / "gd" / "checkpoint.pt").is_file(), 60, "the checkpoint written on Slurm's SIGTERM")
    wait_for(lambda: not subprocess.run(["squeue", "-h", "-n", f"gb-{name}"], capture_output=True, text=True).stdout.strip(),
             120, "the cancelled tasks to leave the queue")
    again = start_sweep(tmp_path, path)
    try:
        stdout, stderr = again.communicate(timeout=900)
    finally:
        stop_sweep(again, name)
    assert again.returncode == 0, stdout + stderr
    assert f"{point.name} at step" in stdout + stderr and "2 of 2 points done, 0 failed" in stdout, stdout + stderr
    summary = json.loads((point / "gd" / "summary.json").read_text())
    assert summary["resumed_from_step"] > 0, summary


def test_a_sweep_directory_whose_name_would_inject_a_job_script_line_is_refused(tmp_path):
    """The sweep directory is written into the job script's #SBATCH --output/--error lines: a name
    holding a newline would end the comment and run the rest as a line of the script. Refused in
    one line before anything is submitted or written (no cluster needed)."""
    path = write(tmp_path, {"contexts.seed": [1, 2]}, name="inject")
    out = tmp_path / "runs" / "x\ntouch /tmp/gb-injected-by-a-name"
    line = refused(gb(tmp_path, "sweep", str(path), "--executor", "slurm", "--out", str(out), timeout=300))
    assert line.startswith("gb: error: --out: ") and "control character" in line, line
    assert not out.exists() and not Path("/tmp/gb-injected-by-a-name").exists()


def test_the_job_name_holds_only_plain_characters():
    from gbcli.runs.executors.slurm import slurm_parameters

    opts = {"time_min": 10, "cpus": 1, "mem_gb": 2, "slurm": {}}
    assert slurm_parameters(opts, 1, "a b;c$(x)")["job_name"] == "gb-a_b_c__x_"
    assert slurm_parameters(opts, 1, "fig2.v1")["job_name"] == "gb-fig2.v1"


# ------------------------------------------------------------------ scripts/slurm-cluster.sh stop

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "slurm-cluster.sh"


def cluster_script(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def slurm_cluster():
    """A cluster started by scripts/slurm-cluster.sh (so its `stop` has daemons to stop), running
    again after the test whatever the test did to it."""
    if os.geteuid() != 0:
        pytest.skip("scripts/slurm-cluster.sh starts the daemons as root")
    start = cluster_script("start")
    if start.returncode != 0:
        pytest.skip(f"scripts/slurm-cluster.sh start failed: {start.stderr.strip()[-300:]}")
    need_slurm()
    if not Path("/run/gb-slurm/started").is_file():
        pytest.skip("the running cluster was not started by scripts/slurm-cluster.sh: its stop stops nothing")
    yield
    if slurm_answers():   # the test stopped it: the other Slurm tests need it
        assert cluster_script("start").returncode == 0


def submit_sleep(*as_user: str) -> str:
    name = f"gb-stop-test-{uuid.uuid4().hex[:6]}"
    out = subprocess.run(["sbatch", "--parsable", *as_user, "--chdir=/tmp", "--output=/dev/null", f"--job-name={name}",
                          "--time=15", "--wrap", "sleep 900"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def in_queue(job: str) -> str:
    """The job's "user state" while squeue lists it (empty once it has left the queue)."""
    return subprocess.run(["squeue", "-h", "-j", job, "-o", "%u %T"], capture_output=True, text=True,
                          timeout=30).stdout.strip()


def cancel(job: str) -> None:
    subprocess.run(["scancel", job], timeout=30)
    wait_for(lambda: not in_queue(job), 120, f"job {job} to leave the queue")


@pytest.mark.slurm
def test_stop_refuses_while_another_users_job_is_queued_and_the_cluster_stays_up(slurm_cluster):
    """Issue: `scripts/slurm-cluster.sh stop` stopped a cluster another user's sweep ran on. With a
    job of user nobody queued (root may submit as another uid), stop refuses in one line naming
    the user, the job and --force, and the cluster keeps answering; so does a job of the caller's own."""
    other = submit_sleep("--uid=nobody", "--gid=nogroup")
    try:
        assert in_queue(other).startswith("nobody ")
        proc = cluster_script("stop", timeout=120)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stdout + proc.stderr
        assert lines[0].startswith("slurm-cluster: not stopping: jobs still queued or running: ")
        assert re.search(rf"\bnobody: ([^;]*, )?{other} \((PENDING|RUNNING|CONFIGURING)\)", lines[0]), lines[0]
        assert "'stop --force'" in lines[0] and "slurm: stopped" not in proc.stdout
        assert slurm_answers() is None                          # sinfo still answers
        assert in_queue(other).startswith("nobody ")            # and the job is still there
        assert cluster_script("status", timeout=60).returncode == 0
    finally:
        cancel(other)

    own = submit_sleep()
    try:
        proc = cluster_script("stop", timeout=120)
        assert proc.returncode == 1 and "root (yours): " in proc.stderr, proc.stderr   # ids: at most 5 per user
        assert slurm_answers() is None and in_queue(own).startswith("root ")
    finally:
        cancel(own)
    assert cluster_script("stop", "--now", timeout=60).returncode == 2   # a misspelt flag stops nothing
    assert slurm_answers() is None
