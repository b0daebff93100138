"""The records of a run directory, read as data: the one place that says what status a stage has.

A record (`gd/summary.json`, `svm/<objective>/result.json`, a point's `failed.json`) is untrusted:
its status word is taken only when its own numbers bear it out, so every view (`gb compare`,
`gb runs`, `gb verify`, a sweep's tables) shows one status for one record.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from gbcli.errors import GbError
from gbcli.programs.design import Status
from gbcli.fs.layout import THETA
from gbcli.fs.safe import load_npz_untrusted, read_csv_untrusted, read_json

# what code that reads a received record as gb writes it raises when the record is not gb's (a missing
# key, a text where a number goes, an empty or unparseable file, a link or a folder where a file goes)
NOT_GBS = (KeyError, TypeError, ValueError, AttributeError, IndexError, OSError)
GD_WORDS = ("ok", "diverged")
SVM_WORDS = tuple(s.value for s in Status)
CERTIFY_TOL = 1e-6   # the tolerance a record is held to when it names none (svm.certify_tol's default)


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
    """The GD stage's status from its record: `ok` only with a finite training loss; `foreign` for
    anything that is not a gb record."""
    if rec is None:
        return "foreign"
    status = rec.get("status")
    if status not in GD_WORDS:
        return "foreign"
    if status == "ok" and number(rec.get("train_loss")) is None:
        return "diverged"   # a non-finite loss is no trained network
    if status == "ok" and any(rec.get(k) is not None and not (number(rec[k]) is not None and 0 <= number(rec[k]) <= 1)
                              for k in ("train_error", "val_error")):
        return "foreign"   # an error rate no network has: not a record gb wrote
    return status


def program_status(rec: dict | None) -> str:
    """A program's status from its record, checked against its own certificate fields: `optimal`
    needs certified = true, a finite relative gap and a smallest margin within the tolerance it
    names; `infeasible` needs certified = true. A record that claims more than its numbers bear is
    `inaccurate` (an optimum not certified), `uncertified` (infeasibility not certified) or
    `unverified` (certified fields that contradict its status); `foreign` when it is not gb's."""
    if rec is None:
        return "foreign"
    status = rec.get("status")
    if status not in SVM_WORDS:
        return "foreign"
    if rec.get("certified") is not True:
        return {"optimal": "inaccurate", "infeasible": "uncertified"}.get(status, status)
    if rec.get("convex") is False:   # a non-convex program: `certified` says its point is feasible, no more
        return status if status in ("optimal", "failed") else "unverified"
    if status == "optimal":
        gap, margin = number(rec.get("rel_gap")), number(rec.get("min_margin"))
        tol = number(rec.get("tolerance"))
        tol = CERTIFY_TOL if tol is None or not 0 < tol < 1 else tol
        objective = number(rec.get("objective"))
        if gap is None or margin is None or not abs(gap) <= tol or not margin >= 1 - tol \
                or objective is None or objective < 0:   # an optimum is a finite norm
            return "unverified"
    elif status in ("inaccurate", "failed"):
        return "unverified"   # a certified record with an uncertified status: not gb's
    return status


def stage_status(record: Path, rec: dict | None) -> str:
    """`program_status` of the record at `record`, and for a non-convex program (paper 003) whose
    record claims a point, that point: the theta.npz beside it, whose ||theta||^2 is the record's
    objective, or the record is `unverified` (the search's other claims are checked by `gb verify`,
    which reruns it)."""
    status = program_status(rec)
    if status != "optimal" or rec.get("convex") is not False:
        return status
    import numpy as np

    try:
        theta = np.asarray(load_npz_untrusted(record.parent / THETA)["theta"], dtype=np.float64)
    except Exception:   # noqa: BLE001 (missing, a link, not an npz, no theta: no point to stand on)
        return "unverified"
    objective = number(rec.get("objective"))
    if theta.ndim != 1 or not np.isfinite(theta).all() or objective is None \
            or not np.isclose(float(theta @ theta), objective, rtol=1e-9, atol=0):
        return "unverified"
    return status


def stage_record(path: Path, keys: tuple[str, ...], gd: bool = False) -> dict:
    """A stage record (summary.json / result.json) that a table is built from: a JSON object with
    at least `keys`, a status word of gb's, errors in [0, 1] (or NaN), flags booleans and numbers
    numbers. GbError naming the file otherwise."""
    try:
        rec = read_json(path)
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise GbError(f"{path}: unreadable or corrupt result file ({type(exc).__name__}); rerun the stage") from None
    if not isinstance(rec, dict):
        raise GbError(f"{path}: not a gb stage record (a JSON {type(rec).__name__}, not an object); rerun the stage")
    missing = [k for k in keys if k not in rec]
    if missing:
        raise GbError(f"{path}: not a gb stage record (missing {', '.join(missing)}); rerun the stage")

    def bad(why: str):
        raise GbError(f"{path}: not a gb stage record ({why}); rerun the stage")

    status = rec.get("status")
    if not isinstance(status, str) or status not in (GD_WORDS if gd else SVM_WORDS):
        bad(f"status {str(status)[:40]!r} is not one of {', '.join(GD_WORDS if gd else SVM_WORDS)}")
    if not isinstance(rec.get("predictor"), str):
        bad("predictor is not a name")
    for k in ("train_error", "val_error"):
        v = rec.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            bad(f"{k} {str(v)[:40]!r} is not an error rate in [0, 1]")
        if v != v:   # NaN: no predictor (a failed solve); a result has its errors
            if status in ("ok", "optimal"):
                bad(f"{k} is NaN in a record whose status is {status}")
            continue
        if number(v) is None or not 0 <= number(v) <= 1:
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
        if status == "optimal" and rec.get("convex") is not False and \
                not (number(rec.get("objective")) is not None and number(rec["objective"]) >= 0):
            bad(f"objective {str(rec.get('objective'))[:40]!r} of an optimum is not a finite norm (>= 0)")
    return rec


# what the training loop logs at every step (its instruments add their own columns)
METRICS_COLUMNS = ("step", "epoch", "lr", "train_loss", "train_error", "val_error", "weight_norm", "normalized_margin")


def read_metrics(path: Path):
    """A stage's gd/metrics.csv (untrusted) as a DataFrame, as gb writes it: every column the training
    loop logs, numbers only (NaN or infinite where a diverged step has nothing finite), whole,
    non-negative steps in order. A header alone (a run stopped before its first row) is an empty
    table. Anything else is one line naming the file (GbError)."""
    import numpy as np
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
