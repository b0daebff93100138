"""Error and inconsistency tables of a run directory (protocol section 7).

- errors: one row per predictor (the GD network and every solved program);
- inconsistency: one row per (convex predictor, GD predictor) pair: the fraction of validation
  points on which sign(f_a) != sign(f_b), next to 2p(1-p), the inconsistency expected of an
  uncorrelated predictor with the GD network's validation error p.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from gbcli.errors import GbError
from gbcli.io import load_npz_untrusted, load_yaml, read_csv_untrusted, read_json, read_text_untrusted, write_csv
from gbcli.metrics import expected_if_uncorrelated, inconsistency
from gbcli.registry import MODELS

ERROR_COLUMNS = ["predictor", "model", "hidden_units", "contexts", "train_size", "data_seed", "context_seed",
                 "init_seed", "median_init", "momentum", "train_error", "val_error", "status", "objective",
                 "solve_seconds", "solver", "min_margin", "rel_gap", "certified", "iterations"]
INCONSISTENCY_COLUMNS = ["predictor_a", "predictor_b", "inconsistency", "gd_val_error", "svm_val_error",
                         "expected_if_uncorrelated", "published_inconsistency", "model", "hidden_units", "contexts", "train_size",
                         "data_seed", "context_seed", "init_seed", "median_init", "momentum", "gd_status"]


def _read(path: Path, parse):
    """Read a result file; a missing or corrupt one is a one-line GbError naming it."""
    try:
        return parse(path)
    except (OSError, ValueError, UnicodeDecodeError, yaml.YAMLError, EOFError) as exc:
        raise GbError(f"{path}: unreadable or corrupt result file ({type(exc).__name__}); rerun the stage") from None


SUMMARY_KEYS = ("predictor", "train_error", "val_error", "status")
RESULT_KEYS = ("predictor", "train_error", "val_error", "status")


def _record(path: Path, keys: tuple[str, ...], gd: bool = False) -> dict:
    """A stage record (summary.json / result.json): a JSON object with at least `keys`."""
    rec = _read(path, read_json)
    if not isinstance(rec, dict):
        raise GbError(f"{path}: not a gb stage record (a JSON {type(rec).__name__}, not an object); rerun the stage")
    missing = [k for k in keys if k not in rec]
    if missing:
        raise GbError(f"{path}: not a gb stage record (missing {', '.join(missing)}); rerun the stage")
    _check_types(path, rec, gd)
    return rec


GD_WORDS = ("ok", "diverged")
SVM_WORDS = ("optimal", "inaccurate", "infeasible", "failed")


def _check_types(path: Path, rec: dict, gd: bool) -> None:
    """A received record is data, not trusted: its status must be one of gb's words, its errors
    numbers in [0, 1] (or NaN: nothing to measure), its flags booleans and its objective a number."""
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
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (v == v and not 0 <= v <= 1):
            bad(f"{k} {str(v)[:40]!r} is not an error rate in [0, 1]")
    if not gd:
        if "certified" in rec and not isinstance(rec["certified"], bool):
            bad(f"certified {str(rec['certified'])[:40]!r} is not true or false")
        for k in ("objective", "rel_gap", "min_margin", "solve_seconds"):
            v = rec.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                bad(f"{k} {str(v)[:40]!r} is not a number")


def _outputs(path: Path, n: int | None = None, key: str = "val_out") -> np.ndarray:
    """The validation outputs of a predictions.npz (GbError naming the file when it is not one)."""
    def load(p):
        with load_npz_untrusted(p) as z:
            return np.asarray(z[key if key in z.files or key == "val_out" else "val_out"], dtype=float)

    try:
        out = load(path)
    except KeyError:
        raise GbError(f"{path}: has no val_out array; rerun the stage") from None
    except Exception as exc:   # truncated zip, foreign file: numpy raises a variety of errors
        raise GbError(f"{path}: unreadable or corrupt result file ({type(exc).__name__}); rerun the stage") from None
    if out.ndim != 1 or (n is not None and len(out) != n):
        raise GbError(f"{path}: val_out has shape {out.shape}, expected ({n},); the stages do not belong together "
                      f"(rerun them)")
    return out


def _meta(config_path: Path) -> dict:
    cfg = _read(config_path, lambda p: load_yaml(read_text_untrusted(p, 10_000_000)))
    if not isinstance(cfg, dict):
        raise GbError(f"{config_path}: not a resolved gb config; rerun the stage")
    try:
        m, c, d, t = cfg["model"], cfg["contexts"], cfg["dataset"], cfg["training"]
        row = {"contexts": c["count"], "train_size": d["train_size"], "data_seed": d["data_seed"],
               "context_seed": c["seed"], "median_init": c["median_init"], "momentum": t["momentum"]}
    except (KeyError, TypeError):
        raise GbError(f"{config_path}: not a resolved gb config; rerun the stage") from None
    spec = MODELS.get(m.get("kind")) if isinstance(m, dict) else None
    if spec is None:
        raise GbError(f"{config_path}: model.kind {m.get('kind') if isinstance(m, dict) else m!r} is not a known "
                      f"model; rerun the stage") from None
    try:
        params = spec.Params.model_validate({k: v for k, v in m.items() if k in spec.Params.model_fields})
        units = spec.units(params)
        init_seed = params.init_seed if params.init_seed is not None else spec.default_init_seed(_Resolved(cfg))
    except Exception:
        raise GbError(f"{config_path}: not a resolved gb config; rerun the stage") from None
    return {"model": m["kind"], "hidden_units": units, **row, "init_seed": init_seed}


class _Resolved:
    """Attribute access to a dumped config's sections (what a spec's default_init_seed reads)."""

    def __init__(self, d: dict):
        self._d = d

    def __getattr__(self, key):
        v = self._d[key]
        return _Resolved(v) if isinstance(v, dict) else v


def compare(run_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Build both tables from a run directory's completed stages."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise GbError(f"{run_dir}: no such run directory")
    errors, pairs = [], []
    gd = None
    if (run_dir / "gd" / "summary.json").is_file():
        s = _record(run_dir / "gd" / "summary.json", SUMMARY_KEYS, gd=True)
        meta = _meta(run_dir / "gd" / "config.yaml")
        gd = (s, _outputs(run_dir / "gd" / "predictions.npz"),
              _outputs(run_dir / "gd" / "predictions.npz", key="val_out_published"))
        errors.append({**meta, "predictor": s["predictor"], "train_error": s["train_error"],
                       "val_error": s["val_error"], "status": s["status"]})
    for result in sorted((run_dir / "svm").glob("*/result.json")):
        r = _record(result, RESULT_KEYS)
        meta = _meta(result.parent / "config.yaml")
        errors.append({**meta, **{k: r.get(k) for k in ("predictor", "train_error", "val_error", "status", "objective",
                                                        "solve_seconds", "solver", "min_margin", "rel_gap",
                                                        "certified", "iterations")}})
        preds = result.parent / "predictions.npz"
        if gd is not None and preds.is_file():
            s, gd_val, gd_published = gd
            p = s["val_error"]
            svm_val = _outputs(preds, len(gd_val))
            pairs.append({**meta, "predictor_a": r["predictor"], "predictor_b": s["predictor"],
                          "inconsistency": inconsistency(svm_val, gd_val), "gd_val_error": p,
                          "svm_val_error": r["val_error"], "expected_if_uncorrelated": expected_if_uncorrelated(p),
                          # measured as the published comparison did (protocol section 10); the same
                          # number wherever that comparison did not differ
                          "published_inconsistency": inconsistency(svm_val, gd_published),
                          "gd_status": s["status"]})   # a pair with a diverged network says so
    if not errors:
        raise GbError(f"{run_dir}: no results yet (run `gb train-gd` and/or `gb fit-svm` first)")
    return (pd.DataFrame(errors).reindex(columns=ERROR_COLUMNS),
            pd.DataFrame(pairs).reindex(columns=INCONSISTENCY_COLUMNS))


def write_tables(out_dir: str | Path, errors: pd.DataFrame, incons: pd.DataFrame) -> None:
    """inconsistency.csv, then errors.csv: a sweep counts a point as done when errors.csv exists, so
    it must come last (a kill -9 between the two once left a "done" point without its
    inconsistency table, and the resumed sweep failed on it)."""
    out = Path(out_dir) / "tables"
    write_csv(out / "inconsistency.csv", incons)
    write_csv(out / "errors.csv", errors)


REQUIRED_COLUMNS = {"errors": ["predictor", "model", "hidden_units", "contexts", "train_size", "median_init",
                               "momentum", "train_error", "val_error", "status"],
                    "inconsistency": ["predictor_a", "predictor_b", "inconsistency", "gd_val_error",
                                      "expected_if_uncorrelated"]}


def read_tables(out_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The error and inconsistency tables written by `compare` or `sweep` (GbError when missing)."""
    frames = []
    for name in ("errors", "inconsistency"):
        path = Path(out_dir) / "tables" / f"{name}.csv"
        if not path.is_file():
            raise GbError(f"{path}: not found (run `gb compare` on a run or `gb sweep` first)")
        try:
            frame = read_csv_untrusted(path)
        except pd.errors.EmptyDataError:
            raise GbError(f"{path}: is empty (no finished points to plot)") from None
        except (pd.errors.ParserError, UnicodeDecodeError, ValueError, OSError) as exc:
            raise GbError(f"{path}: not a gb table ({type(exc).__name__})") from None
        need = REQUIRED_COLUMNS[name]
        missing = [c for c in need if c not in frame.columns]
        if missing:
            raise GbError(f"{path}: not a gb {name} table (missing columns {', '.join(missing)})")
        frames.append(frame)
    return frames[0], frames[1]


def rich_table(frame: pd.DataFrame, title: str, columns: list[str]):
    """A rich Table of the chosen columns, floats to 4 significant digits."""
    from rich.table import Table

    table = Table(title=title)
    cols = [c for c in columns if c in frame.columns]
    for c in cols:
        table.add_column(c, justify="left" if frame[c].dtype == object else "right")
    for _, row in frame.iterrows():
        table.add_row(*[_fmt(row[c]) for c in cols])
    return table


def _fmt(v) -> str:
    if isinstance(v, float):
        return "" if np.isnan(v) else f"{v:.4g}"
    return str(v)


CONFIG_KEYS = ["predictor", "model", "hidden_units", "contexts", "train_size", "median_init", "momentum"]
SEED_KEYS = ["data_seed", "context_seed", "init_seed"]
USABLE_STATUSES = ("ok", "optimal", "inaccurate")


def pair_key(errors: pd.DataFrame, incons: pd.DataFrame) -> list[str]:
    """Columns that identify a grid point in both tables: `point` (sweeps), else config + seeds."""
    if "point" in errors.columns and "point" in incons.columns:
        return ["point"]
    return [k for k in CONFIG_KEYS + SEED_KEYS if k != "predictor"]


def summarize(errors: pd.DataFrame, incons: pd.DataFrame) -> pd.DataFrame:
    """Mean and std (ddof=1) over seeds of every configuration's errors and inconsistency.

    Statistics use the usable rows (status ok, optimal or inaccurate); n_seeds counts every row
    of the configuration and n_failed those with another status (failed, infeasible, nan).
    Inconsistency columns are NaN for GD predictors.
    """
    key = pair_key(errors, incons)
    inc = (incons.rename(columns={"predictor_a": "predictor"})
           .drop_duplicates(key + ["predictor"])[key + ["predictor", "inconsistency", "expected_if_uncorrelated"]])
    rows = errors.merge(inc, on=key + ["predictor"], how="left")
    usable = rows["status"].isin(USABLE_STATUSES)
    stats = ["val_error", "train_error", "inconsistency", "expected_if_uncorrelated"]
    rows[stats] = rows[stats].astype(float).where(usable, np.nan)
    rows["failed"] = ~usable
    out = rows.groupby(CONFIG_KEYS, dropna=False, sort=False).agg(
        n_seeds=("status", "size"), val_error_mean=("val_error", "mean"), val_error_std=("val_error", "std"),
        train_error_mean=("train_error", "mean"), train_error_std=("train_error", "std"),
        inconsistency_mean=("inconsistency", "mean"), inconsistency_std=("inconsistency", "std"),
        expected_if_uncorrelated_mean=("expected_if_uncorrelated", "mean"), n_failed=("failed", "sum"),
    ).reset_index()
    out["n_failed"] = out["n_failed"].astype(int)
    return out.sort_values(CONFIG_KEYS, kind="mergesort", na_position="last").reset_index(drop=True)


def overview(errors: pd.DataFrame, incons: pd.DataFrame) -> pd.DataFrame:
    """One line per predictor (and momentum, when the points differ in it): points, how many of
    them are certified infeasible, mean train and validation error (over the solved points), mean
    inconsistency with the GD network."""
    by = ["predictor"] + (["momentum"] if "momentum" in errors and errors["momentum"].nunique() > 1 else [])
    view = (errors.assign(infeasible=errors["status"] == "infeasible").groupby(by, sort=True)
            .agg(points=("val_error", "size"), infeasible=("infeasible", "sum"), train_error=("train_error", "mean"),
                 val_error=("val_error", "mean")).reset_index())
    if len(incons):
        inc = (incons.rename(columns={"predictor_a": "predictor"}).groupby(by)
               .agg(inconsistency=("inconsistency", "mean"),
                    expected_if_uncorrelated=("expected_if_uncorrelated", "mean")).reset_index())
        view = view.merge(inc, on=by, how="left")
    return view
