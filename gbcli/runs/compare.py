"""`gb compare`: a run's tables from its finished stages' records, one row per predictor (errors) and one per
program paired with the trained network (inconsistency); statuses as the store computes them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import yaml

from gbcli.config.loading import read_stored_config, validate
from gbcli.errors import GbError
from gbcli.metrics import expected_if_uncorrelated, inconsistency
from gbcli.registry import MODELS, spec_of
from gbcli.reports.tables import (CONFIG_COLUMNS, ERROR_COLUMNS, INCONSISTENCY_COLUMNS, Rows, check_tables_dir,
                                  write_tables)
from gbcli.fs import layout
from gbcli.programs.design import Status
from gbcli.store.records import NOT_GBS, GdRecord, GdStatus, ProgramRecord, Verdict, number, stage_record
from gbcli.store.views import RunView
from gbcli.logs import run_log
from gbcli.store.integrity import check_run
from gbcli.store.lock import check_kind, run_lock
from gbcli.fs.safe import check_tree, is_file, load_npz_untrusted, staged_writes
from gbcli.text import quoted

if TYPE_CHECKING:
    import pandas as pd


STAGE_KEYS = ("predictor", "train_error", "val_error", "status")   # what a table takes of every stage record


def _outputs(path: Path, n: int | None = None, key: str = "val_out", against: Path | None = None) -> np.ndarray:
    """An output array of a predictions.npz (GbError naming the file when it is not one); `n`: the length of
    the outputs in `against` they are compared with."""
    try:
        with load_npz_untrusted(path) as z:
            arr = z[key if key in z.files or key == "val_out" else "val_out"]
    except KeyError:
        raise GbError(f"{path}: has no val_out array; rerun the stage") from None
    except Exception as exc:   # truncated zip, foreign file: numpy raises a variety of errors
        raise GbError(f"{path}: unreadable or corrupt result file ({type(exc).__name__}); rerun the stage") from None
    if arr.dtype.kind not in "fiu":
        raise GbError(f"{path}: {key} holds {arr.dtype} values, not real outputs; rerun the stage")
    out = np.asarray(arr, dtype=float)
    if out.ndim != 1 or (n is not None and len(out) != n):
        other = f" as {against} has" if against is not None else ""
        raise GbError(f"{path}: {key} has shape {out.shape}, expected ({n},){other}; the stages do not belong "
                      f"together (rerun them)")
    return out


def _meta(config_path: Path) -> dict:
    """The columns a table takes from a stage's config.yaml (validated, as `check_run` validates it)."""
    try:
        cfg = validate(read_stored_config(config_path, strict=True), str(config_path))
    except (OSError, ValueError, yaml.YAMLError, RecursionError) as exc:
        raise GbError(f"{config_path}: unreadable or corrupt result file ({type(exc).__name__}); "
                      "rerun the stage") from None
    spec, c = spec_of(cfg), cfg.contexts
    return {"model": cfg.model.kind, "hidden_units": spec.units(cfg.model), "contexts": c.count,
            "train_size": cfg.dataset.train_size, "data_seed": cfg.dataset.data_seed, "context_seed": c.seed,
            "median_init": c.median_init, "momentum": cfg.training.momentum, "init_seed": spec.init_seed(cfg)}


def run_rows(run_dir: str | Path) -> tuple[Rows, Rows]:
    """Both tables of a run directory's completed stages, as Rows (no pandas: `gb compare`)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise GbError(f"{run_dir}: no such run directory")
    errors, pairs, gd_val = [], [], None
    run = layout.RunDir(run_dir)
    if is_file(run.summary):
        s = stage_record(run.summary, STAGE_KEYS, gd=True)
        meta = _meta(run.gd_config)
        gd_val = _outputs(run.gd_predictions)
        gd_state = GdRecord(run.summary, s).status
        if gd_state == GdStatus.OK and not (np.isfinite(gd_val).all()
                                     and np.isfinite(_outputs(run.gd_predictions, key="train_out")).all()):
            gd_state = GdStatus.DIVERGED   # computed from the network's outputs, whatever its record says
        gd_published = _outputs(run.gd_predictions, len(gd_val), key="val_out_published")
        errors.append({**meta, **{k: s[k] for k in STAGE_KEYS}, "status": gd_state})
    for result in run.results():
        r = stage_record(result, STAGE_KEYS)
        meta = _meta(result.parent / layout.CONFIG)
        status = ProgramRecord(result, r).status   # one status for one record (gb runs shows the same)
        preds = result.parent / layout.PREDICTIONS
        svm_val = _outputs(preds, None if gd_val is None else len(gd_val), against=run.gd_predictions) \
            if is_file(preds) else None
        if status in (Status.OPTIMAL, Status.INACCURATE) and svm_val is not None and not np.isfinite(svm_val).all():
            status = Verdict.UNVERIFIED   # a predictor's outputs are finite: these are not its outputs
        errors.append({**meta, **{k: r.get(k) for k in ERROR_COLUMNS if k not in CONFIG_COLUMNS}, "status": status})
        if gd_val is not None and svm_val is not None:
            p = s["val_error"]
            disagree = inconsistency(svm_val, gd_val)
            # |e_a - e_b| <= disagreement <= e_a + e_b (1e-9: rounding), else the records were not computed from
            # these predictions (edited or mixed files): refused as a stale stage is
            a, b = number(r["val_error"]), number(p)
            if gd_state == GdStatus.OK and status in (Status.OPTIMAL, Status.INACCURATE) and a is not None \
                    and b is not None and not abs(a - b) - 1e-9 <= disagree <= a + b + 1e-9:
                raise GbError(f"{result}: its val_error {a:.6g} and the network's {b:.6g} ({run.summary}) cannot come "
                              f"from their predictions, which disagree on {disagree:.6g} of the validation points "
                              f"(edited or mixed files); rerun the stages")
            pairs.append({**meta, "predictor_a": r["predictor"], "predictor_b": s["predictor"],
                          "inconsistency": disagree, "gd_val_error": p,
                          "svm_val_error": r["val_error"], "expected_if_uncorrelated": expected_if_uncorrelated(p),
                          # measured as the published comparison did (protocol section 10)
                          "published_inconsistency": inconsistency(svm_val, gd_published),
                          "gd_status": gd_state})   # a pair with a diverged network says so
    if not errors:
        raise GbError(f"{run_dir}: no results yet (run `gb train-gd` and/or `gb fit-svm` first)")
    return Rows(errors, ERROR_COLUMNS), Rows(pairs, INCONSISTENCY_COLUMNS)


def compare(run_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    return tuple(rows.frame() for rows in run_rows(run_dir))


def run_tables(run_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The tables as `gb compare` computes them, writing nothing (None when no stage has run): what `gb plot`
    draws, never an earlier `gb compare`'s tables/, which may no longer be the records'."""
    run = layout.RunDir(run_dir)
    if not is_file(run.summary) and not run.results():
        return None
    check_run(run_dir)
    return compare(run_dir)


def _drawn_and_reported(run_dir: Path) -> tuple:
    """What `compare_run` draws and reports besides its tables: the training figure (training.track) and the
    experiments' run reports (a non-convex program). Without them no torch nor matplotlib is loaded (speed)."""
    view = RunView(run_dir)
    training = (view.config() or {}).get("training")
    drawn = ()
    if isinstance(training, dict) and training.get("track"):
        from gbcli.runs.figures import plot_run_training   # matplotlib and torch: only when drawing

        drawn = (plot_run_training,)
    nonconvex = {name for spec in MODELS.values() for name, p in spec.programs.items() if p.fit is not None}
    if not any(r.parent.name in nonconvex for r in view.dir.results()):
        return drawn
    from gbcli.registry import RUN_REPORTS   # the experiments' reports (they load torch)

    return drawn + tuple(RUN_REPORTS)


def compare_run(run_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    return tuple(rows.frame() for rows in write_run_tables(run_dir))


def write_run_tables(run_dir: str | Path) -> tuple[Rows, Rows]:
    """`gb compare`: the run's tables, with the tracked instruments' figure and the experiments' run reports
    where it has them; nothing is written when one fails."""
    check_tree(run_dir)
    check_tables_dir(run_dir)   # a file where tables/ goes: refused before log.txt or a figure is written
    check_kind(run_dir, "run", key="RUN_DIR", command="compare_run")
    check_run(run_dir)
    errors, incons = run_rows(run_dir)
    with run_lock(run_dir, key="RUN_DIR"), run_log(run_dir), staged_writes():   # a failure writes none of it
        for report in _drawn_and_reported(run_dir):
            try:
                report(run_dir)
            except NOT_GBS as exc:   # a foreign record
                raise GbError(f"{run_dir}: a stage record that {report.__name__} reads is not gb's "
                              f"({type(exc).__name__}: {quoted(str(exc), 120)}); rerun the stage") from None
        write_tables(run_dir, errors, incons)
    return errors, incons
