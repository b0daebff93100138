"""The records of a run directory, read as data: the one place that says what status a stage has.
A record is untrusted: its status word is taken only when its own numbers bear it out."""

from __future__ import annotations

import dataclasses
import math
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from gbcli.errors import GbError
from gbcli.programs.design import Status, certified_status
from gbcli.fs.layout import ERRORS, FAILURES, INCONSISTENCY, THETA, RunDir, SweepDir
from gbcli.fs.safe import (is_file, load_npz_untrusted, present, read_csv_untrusted, read_json, read_record, subdirs,
                           write_json)

# what reading a received record as gb writes it raises when the record is not gb's
NOT_GBS = (KeyError, TypeError, ValueError, AttributeError, IndexError, OSError)
CERTIFY_TOL = 1e-6   # the tolerance a record is held to when it names none (svm.certify_tol's default)


class GdStatus(StrEnum):
    """The status word of a GD stage's record (a program's is `Status`)."""

    OK = "ok"                # trained, with a finite training loss
    DIVERGED = "diverged"    # the loss left the finite numbers


class Verdict(StrEnum):
    """What the views say of a stage when its record's own word cannot stand."""

    FOREIGN = "foreign"           # not a record gb wrote
    UNCERTIFIED = "uncertified"   # an infeasibility without its certificate
    UNVERIFIED = "unverified"     # certificate fields that contradict its status
    STALE = "stale"               # its problem or network changed since it was computed
    UNFINISHED = "unfinished"     # a stage folder without its record (interrupted, failed or running)


class RunState(StrEnum):
    """A run directory's state (`gb runs`)."""

    COMPLETE = "complete"      # every stage a result, and its tables
    SOLVED = "solved"          # trained and solved, no tables yet
    TRAINED = "trained"        # the GD stage alone
    PARTIAL = "partial"        # an unfinished stage, or programs without a GD stage
    EMPTY = "empty"
    FAILED = "failed"          # a stage that is no result (diverged, inaccurate, failed, uncertified)
    FOREIGN = "foreign"
    STALE = "stale"
    UNVERIFIED = "unverified"


class PointState(StrEnum):
    """A sweep point's state (`point_state`)."""

    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"   # stopped with its sweep: a rerun runs it again
    NOT_RUN = "not run"


class SweepState(StrEnum):
    """A sweep directory's state (`sweep_state`)."""

    COMPLETE = "complete"
    UNAGGREGATED = "unaggregated"   # every point done, the sweep's own tables not (yet) written
    FAILED = "failed"
    PARTIAL = "partial"
    EMPTY = "empty"


def is_result(status: Any, certified: Any = True, gd: bool = False) -> bool:
    """A GD stage's `ok`; a program's `optimal` or `infeasible` with `certified` true."""
    return status == GdStatus.OK if gd else certified is True and status in (Status.OPTIMAL, Status.INFEASIBLE)


def resumable(rec: Any) -> bool:
    """The rerun rule: a program stopped by svm.time_limit short of its optimum is solved again (a
    forged flag costs a solve, never a wrong result)."""
    return isinstance(rec, dict) and rec.get("time_limited") is True and rec.get("status") != Status.OPTIMAL


def run_state(stages: dict[str, str], tables: bool) -> RunState:
    """A run directory's state from its stages' computed statuses and whether its tables are written."""
    words = set(stages.values())
    if not stages:
        return RunState.EMPTY
    for verdict in (Verdict.FOREIGN, Verdict.STALE, Verdict.UNVERIFIED):
        if verdict in words:
            return RunState(verdict)
    if words & {GdStatus.DIVERGED, Status.INACCURATE, Status.FAILED, Verdict.UNCERTIFIED}:
        return RunState.FAILED
    if Verdict.UNFINISHED in words or "gd" not in stages:
        return RunState.PARTIAL
    return RunState.COMPLETE if tables else RunState.SOLVED if len(stages) > 1 else RunState.TRAINED


def point_state(point_dir: str | Path, done: bool | None = None) -> PointState:
    """Done when its tables/errors.csv (written last) is there or as `done` says; else interrupted or
    failed as its failed.json says (any word but interrupted is a failure); else not run."""
    run = RunDir(point_dir)
    if is_file(run.errors) if done is None else done:
        return PointState.DONE
    if not present(run.failed):
        return PointState.NOT_RUN
    rec = read_record(run.failed)
    return PointState.INTERRUPTED if rec is not None and rec.get("status") == PointState.INTERRUPTED \
        else PointState.FAILED


@dataclasses.dataclass
class FailureRecord:
    """A sweep point's failed.json: why the point is not done."""

    status: PointState             # failed, or interrupted (stopped with its sweep)
    stage: str                     # train-gd, fit-svm, compare; worker or slurm where its task died
    message: str
    log: str = ""                  # the point's log.txt, when it has one
    seconds: float | None = None   # how long the point ran (the point's own record)
    at: str | None = None          # when its sweep stopped it

    @classmethod
    def of_point(cls, point_dir: str | Path, status: PointState, stage: str, message: str, **extra) -> FailureRecord:
        """The record of a point, naming its log.txt when that file exists."""
        log = RunDir(point_dir).log
        return cls(status, stage, message, str(log.resolve()) if is_file(log) else "", **extra)

    def as_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def write(self, point_dir: str | Path) -> None:
        write_json(RunDir(point_dir).failed, self.as_dict())

    @classmethod
    def read(cls, point_dir: str | Path) -> FailureRecord:
        """A point that is not done, as the failures table shows it (fields as text, "" when never run)."""
        state, path = point_state(point_dir, done=False), RunDir(point_dir).failed
        rec = {} if state == PointState.NOT_RUN else \
            read_record(path) or {"message": f"{path}: unreadable or not a record"}
        return cls(state, *(str(rec.get(k, "")) for k in ("stage", "message", "log")))


@dataclasses.dataclass(frozen=True)
class Record:
    """A JSON record at `path` (received data: a stage's `status` is computed, never taken)."""

    path: Path
    fields: dict

    @classmethod
    def read(cls, path: str | Path, strict: bool = False):
        """The record at `path`; None when missing, a link, unreadable or not an object, or with
        `strict` the error raised (OSError, ValueError; NOT_GBS when a field is used)."""
        rec = read_json(path) if strict else read_record(path)
        return cls(Path(path), rec) if strict or rec is not None else None

    def write(self) -> None:
        write_json(self.path, self.fields)

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.fields[key]

    @property
    def manifest(self) -> dict | None:
        """What the stage was computed from (`identity`); None when the record names none."""
        m = self.get("manifest")
        return m if isinstance(m, dict) else None


class GdRecord(Record):
    """A run's gd/summary.json: the training's record."""

    status = property(lambda self: gd_status(self.fields))


class ProgramRecord(Record):
    """A program's svm/<objective>/result.json."""

    status = property(lambda self: stage_status(self.path, self.fields))
    resumable = property(lambda self: resumable(self.fields))


class SweepRecord(Record):
    """A sweep's sweep.json: its last invocation (name, points, ran, failed, executor, jobs, provenance)."""

    points = property(lambda self: n if isinstance(n := self.get("points"), int) else None)


def sweep_state(sweep_dir: str | Path, total: int | None = None) -> tuple[SweepState, dict[str, int], int]:
    """A sweep's state, its points counted by state and their number (`total`: its record's, those
    without a folder not run; None: its folders)."""
    points = subdirs(SweepDir(sweep_dir).points)
    counts = dict.fromkeys(map(str, PointState), 0)
    for p in points:
        counts[point_state(p)] += 1
    total = len(points) if total is None else total
    counts[PointState.NOT_RUN] += max(0, total - len(points))
    done = counts[PointState.DONE]
    state = SweepState.COMPLETE if done == total and total else SweepState.FAILED if counts[PointState.FAILED] \
        else SweepState.PARTIAL if done else SweepState.EMPTY
    tables = SweepDir(sweep_dir).tables
    if state == SweepState.COMPLETE and not all(is_file(tables / f) for f in (ERRORS, INCONSISTENCY, FAILURES)):
        state = SweepState.UNAGGREGATED
    return state, counts, total


def number(v: Any) -> float | None:
    """A finite number of a record (None for anything else: text, bool, NaN, infinity)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)   # an integer beyond any float (10**400) raises OverflowError
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def gd_status(rec: dict | None) -> str:
    """The GD stage's status: `ok` only with a finite training loss; `foreign` when not gb's."""
    if rec is None or rec.get("status") not in tuple(GdStatus):
        return Verdict.FOREIGN
    status = GdStatus(rec["status"])
    if status == GdStatus.OK and number(rec.get("train_loss")) is None:
        return GdStatus.DIVERGED   # a non-finite loss is no trained network
    rates = [number(v) for k in ("train_error", "val_error") if (v := rec.get(k)) is not None]
    if status == GdStatus.OK and any(r is None or not 0 <= r <= 1 for r in rates):
        return Verdict.FOREIGN   # an error rate no network has: not a record gb wrote
    return status


def program_status(rec: dict | None) -> str:
    """A program's status checked against its certificate: `optimal` needs certified, a finite gap and
    smallest margin within its tolerance; `infeasible` certified. Claiming more gives `inaccurate`,
    `uncertified` or `unverified` (contradicting fields); `foreign` when not gb's."""
    if rec is None or rec.get("status") not in tuple(Status):
        return Verdict.FOREIGN
    status = Status(rec["status"])
    if rec.get("certified") is not True:
        return Verdict.UNCERTIFIED if status == Status.INFEASIBLE else certified_status(status, False)
    if rec.get("convex") is False:   # a non-convex program: `certified` says its point is feasible, no more
        return status if status in (Status.OPTIMAL, Status.FAILED) else Verdict.UNVERIFIED
    if status == Status.OPTIMAL:
        gap, margin = number(rec.get("rel_gap")), number(rec.get("min_margin"))
        tol = number(rec.get("tolerance"))
        tol = CERTIFY_TOL if tol is None or not 0 < tol < 1 else tol
        objective = number(rec.get("objective"))
        if gap is None or margin is None or not abs(gap) <= tol or not margin >= 1 - tol \
                or objective is None or objective < 0:   # an optimum is a finite norm
            return Verdict.UNVERIFIED
    elif status in (Status.INACCURATE, Status.FAILED):
        return Verdict.UNVERIFIED   # a certified record with an uncertified status: not gb's
    return status


def stage_status(record: Path, rec: dict | None) -> str:
    """`program_status`; a non-convex optimum also needs a theta.npz of ||theta||^2 = its objective."""
    status = program_status(rec)
    if status != Status.OPTIMAL or rec.get("convex") is not False:
        return status
    try:
        theta = np.asarray(load_npz_untrusted(record.parent / THETA)["theta"], dtype=np.float64)
    except Exception:   # noqa: BLE001 (missing, a link, not an npz, no theta: no point to stand on)
        return Verdict.UNVERIFIED
    objective = number(rec.get("objective"))
    if theta.ndim != 1 or not np.isfinite(theta).all() or objective is None \
            or not np.isclose(float(theta @ theta), objective, rtol=1e-9, atol=0):
        return Verdict.UNVERIFIED
    return status


def stage_record(path: Path, keys: tuple[str, ...], gd: bool = False) -> dict:
    """A stage record that a table is built from: an object with `keys`, a status word of gb's, errors
    in [0, 1] (or NaN), flags booleans, numbers numbers; GbError naming the file otherwise."""
    try:
        rec = read_json(path)
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise GbError(f"{path}: unreadable or corrupt result file ({type(exc).__name__}); rerun the stage") from None

    def bad(why: str):
        raise GbError(f"{path}: not a gb stage record ({why}); rerun the stage")

    if not isinstance(rec, dict):
        bad(f"a JSON {type(rec).__name__}, not an object")
    if missing := [k for k in keys if k not in rec]:
        bad(f"missing {', '.join(missing)}")
    status, words = rec.get("status"), tuple(GdStatus if gd else Status)
    if not isinstance(status, str) or status not in words:
        bad(f"status {str(status)[:40]!r} is not one of {', '.join(words)}")
    if not isinstance(rec.get("predictor"), str):
        bad("predictor is not a name")
    for k in ("train_error", "val_error"):
        v = rec.get(k)
        if isinstance(v, float) and v != v and status in (GdStatus.OK, Status.OPTIMAL):
            bad(f"{k} is NaN in a record whose status is {status}")   # NaN: no predictor, no result
        if v is not None and v == v and (number(v) is None or not 0 <= number(v) <= 1):
            bad(f"{k} {str(v)[:40]!r} is not an error rate in [0, 1]")
    if not gd:
        if "certified" in rec and not isinstance(rec["certified"], bool):
            bad(f"certified {str(rec['certified'])[:40]!r} is not true or false")
        for k in ("objective", "rel_gap", "min_margin", "solve_seconds"):
            v = rec.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                bad(f"{k} {str(v)[:40]!r} is not a number")
            if isinstance(v, int) and not isinstance(v, bool) and number(v) is None:
                bad(f"{k} is an integer no float holds")
        if status == Status.OPTIMAL and rec.get("convex") is not False and \
                not (number(rec.get("objective")) is not None and number(rec["objective"]) >= 0):
            bad(f"objective {str(rec.get('objective'))[:40]!r} of an optimum is not a finite norm (>= 0)")
    return rec


# what the training loop logs at every step (its instruments add their own columns)
METRICS_COLUMNS = ("step", "epoch", "lr", "train_loss", "train_error", "val_error", "weight_norm", "normalized_margin")


def read_metrics(path: Path):
    """A stage's gd/metrics.csv as gb writes it: every logged column, numbers only (non-finite where a
    step diverged), whole non-negative steps in order; a header alone is an empty table. GbError else."""
    import pandas as pd

    try:
        frame = read_csv_untrusted(path)
    except Exception as exc:   # noqa: BLE001 (pandas raises parser, value, unicode and OS errors)
        raise GbError(f"{path}: not a readable gb metrics table ({type(exc).__name__}); rerun the stage") from None
    missing = [c for c in METRICS_COLUMNS if c not in frame.columns]
    if missing:
        raise GbError(f"{path}: not a gb metrics table (no column {', '.join(missing)}); rerun the stage")
    for col in frame.columns:
        values = pd.to_numeric(frame[col], errors="coerce")
        if (values.isna() & frame[col].notna()).any():
            raise GbError(f"{path}: not a gb metrics table ({str(col)[:40]!r} holds text); rerun the stage")
    step = pd.to_numeric(frame["step"], errors="coerce").to_numpy(float)
    if len(step) and not (np.isfinite(step).all() and (step >= 0).all() and (step == np.floor(step)).all()
                          and (np.diff(step) >= 0).all()):
        raise GbError(f"{path}: not a gb metrics table (its steps are not whole, non-negative and in order); "
                      "rerun the stage")
    return frame
