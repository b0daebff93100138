"""Error and inconsistency tables of a run directory (protocol section 7): errors, one row per predictor;
inconsistency, one row per (convex, GD) pair: the fraction of validation points where sign(f_a) !=
sign(f_b), next to 2p(1-p), that of an uncorrelated predictor with the GD network's error p.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import TYPE_CHECKING

from gbcli.errors import GbError
from gbcli.fs import layout
from gbcli.fs.layout import RunDir
from gbcli.fs.safe import is_dir, is_file, present, read_csv_untrusted, read_untrusted, write_csv
from gbcli.text import printable, quoted

if TYPE_CHECKING:
    import pandas as pd

ERROR_COLUMNS = ["predictor", "model", "hidden_units", "contexts", "train_size", "data_seed", "context_seed",
                 "init_seed", "median_init", "momentum", "train_error", "val_error", "status", "objective",
                 "solve_seconds", "solver", "min_margin", "rel_gap", "certified", "iterations"]
CONFIG_COLUMNS = ERROR_COLUMNS[1:ERROR_COLUMNS.index("train_error")]   # a predictor's configuration, model .. momentum
INCONSISTENCY_COLUMNS = ["predictor_a", "predictor_b", "inconsistency", "gd_val_error", "svm_val_error",
                         "expected_if_uncorrelated", "published_inconsistency", *CONFIG_COLUMNS, "gd_status"]


def _null(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _kind(v) -> str:
    name = type(v).__name__   # numpy's scalars by name: numpy is not imported for a table of Python values
    if isinstance(v, bool) or name == "bool_":
        return "object"
    return ("int" if isinstance(v, int) or name.startswith(("int", "uint")) else
            "float" if isinstance(v, float) or name.startswith("float") else "object")


class Rows:
    """A table as rows of dicts, typed by column as pandas would (`int`: whole, none missing; `float`;
    `object`); its CSV is byte for byte pandas' `to_csv(index=False)`. Not pandas because importing it
    costs about half a CPU second, more than a reading command may spend in all; `frame()` gives one."""

    def __init__(self, rows: list[dict], columns: list[str] | None = None):
        self.columns = list(columns) if columns is not None else list(dict.fromkeys(k for r in rows for k in r))
        self.rows = [{c: r.get(c) for c in self.columns} for r in rows]
        self._given = rows   # for frame(): a key a row lacks is NaN there, one it holds as None stays None

    @classmethod
    def of(cls, table) -> "Rows":
        """A Rows as it is, a DataFrame as its rows (missing values as None)."""
        if isinstance(table, Rows):
            return table
        return cls([{k: (None if _null(v) else v) for k, v in r.items()} for r in table.to_dict("records")],
                   [str(c) for c in table.columns])

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, column: str) -> list:
        return [r[column] for r in self.rows]

    def to_dict(self, orient: str = "records") -> list[dict]:
        return [dict(r) for r in self.rows]

    def kind(self, column: str) -> str:
        values = [v for v in self[column] if not _null(v)]
        kinds = {_kind(v) for v in values}
        if kinds == {"int"} and len(values) == len(self):
            return "int"
        return "float" if kinds and kinds <= {"int", "float"} else "object"

    def cells(self, column: str, number=repr) -> list[str]:
        """The column's values as text: missing ones empty, a float column's by `number`."""
        kind = self.kind(column)
        if kind == "float" and number is repr and all(type(v).__name__ == "float32" for v in self[column]):
            return [str(v) for v in self[column]]   # a float32 column, none missing: pandas keeps its precision
        if kind == "float":
            return ["" if _null(v) else number(float(v)) for v in self[column]]
        return ["" if _null(v) else str(int(v) if kind == "int" else v) for v in self[column]]

    def to_csv(self, index: bool = False) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.columns)
        writer.writerows(zip(*(self.cells(c) for c in self.columns)) if self.rows else [])
        return out.getvalue()

    def frame(self) -> "pd.DataFrame":
        import pandas as pd

        return pd.DataFrame(self._given).reindex(columns=self.columns)


def _cell(text: str):
    """A CSV cell as pandas reads it: empty -> None, True/False, whole number, number, else text."""
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text) if text.lstrip("+-").isdigit() else float(text)
    except ValueError:
        return text


def read_rows(path: str | Path) -> Rows:
    """A CSV table of a run directory (`read_untrusted`: no link followed, size-bounded) as Rows, without
    pandas. ValueError (or OSError, UnicodeDecodeError) when it is not a table."""
    text = read_untrusted(path).decode("utf-8")
    lines = [line for line in csv.reader(io.StringIO(text, newline="")) if line]   # blank lines: skipped, as pandas does
    if not lines:
        raise ValueError(f"{path}: no columns")
    header, body = lines[0], lines[1:]
    if any(len(line) > len(header) for line in body):
        raise ValueError(f"{path}: a row longer than the header")
    return Rows([dict(zip(header, map(_cell, line))) for line in body], header)


def mean_of(values) -> float | None:
    """The mean of the numbers among `values` (text, flags and missing ones left out; None if none)."""
    numbers = [float(v) for v in values if _kind(v) in ("int", "float") and not _null(v)]
    return sum(numbers) / len(numbers) if numbers else None


def write_tables(out_dir: str | Path, errors, incons) -> None:
    """inconsistency.csv, then errors.csv: a sweep counts a point as done when errors.csv exists."""
    out = RunDir(out_dir).tables
    write_csv(out / layout.INCONSISTENCY, incons)
    write_csv(out / layout.ERRORS, errors)


def check_tables_dir(out_dir: str | Path) -> None:
    """Refuse a RUN/tables that is not a folder (a file of the user's) before anything is written."""
    out = RunDir(out_dir).tables
    if present(out) and not is_dir(out):
        raise GbError(f"{out}: not a directory (gb writes its tables into this folder; move the file away)")


CONFIG_KEYS = ["predictor", "model", "hidden_units", "contexts", "train_size", "median_init", "momentum"]
SEED_KEYS = ["data_seed", "context_seed", "init_seed"]
USABLE_STATUSES = ("ok", "optimal", "inaccurate")
REQUIRED_COLUMNS = {"errors": [*CONFIG_KEYS, "train_error", "val_error", "status"],
                    "inconsistency": ["predictor_a", "predictor_b", "inconsistency", "gd_val_error",
                                      "expected_if_uncorrelated"]}


def read_tables(out_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The error and inconsistency tables written by `compare` or `sweep` (GbError when missing)."""
    frames = []
    for name, file in (("errors", layout.ERRORS), ("inconsistency", layout.INCONSISTENCY)):
        path = RunDir(out_dir).tables / file
        if not is_file(path):
            raise GbError(f"{path}: not found (run `gb compare` on a run or `gb sweep` first)")
        frame = _read_csv(path)
        if frame is None:
            raise GbError(f"{path}: is empty (no finished points to plot)")
        missing = [c for c in REQUIRED_COLUMNS[name] if c not in frame.columns]
        if missing:
            raise GbError(f"{path}: not a gb {name} table (missing columns {', '.join(missing)})")
        _check_values(frame, path)
        frames.append(frame)
    return frames[0], frames[1]


def read_failures(out_dir: str | Path) -> list[str]:
    """The points tables/failures.csv lists as not done, as `point (status)` (none without it; GbError if bad)."""
    path = RunDir(out_dir).tables / layout.FAILURES
    frame = _read_csv(path, dtype=str, keep_default_na=False) if is_file(path) else None
    if frame is None:
        return []
    if not {"point", "status"} <= set(frame.columns):
        raise GbError(f"{path}: not a gb failures table (missing columns point, status)")
    return [f"point {p} ({s or 'failed'})" for p, s in zip(frame["point"], frame["status"])]


def _read_csv(path: Path, **kw) -> pd.DataFrame | None:
    """A table of a run directory (None when empty); GbError when it is not a table."""
    import pandas as pd

    try:
        return read_csv_untrusted(path, **kw)
    except pd.errors.EmptyDataError:
        return None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError, OSError) as exc:
        raise GbError(f"{path}: not a gb table ({type(exc).__name__})") from None


FRACTIONS = ("train_error", "val_error", "inconsistency", "expected_if_uncorrelated", "gd_val_error", "svm_val_error")
FINITE = ("objective", "rel_gap", "solve_seconds")
COUNTS = ("hidden_units", "contexts", "train_size")   # sizes of a configuration: whole numbers in 1..2**31


def _check_values(frame: pd.DataFrame, path: Path) -> None:
    """A received table's numbers are what gb writes: fractions in [0, 1], objectives, gaps and times
    finite, sizes whole in 1..2**31, or empty (a value near 1e308 would break the figures' axes)."""
    import numpy as np
    import pandas as pd

    for col in [c for c in (*FRACTIONS, *FINITE, *COUNTS) if c in frame.columns]:
        values = pd.to_numeric(frame[col], errors="coerce")
        bad = values.notna() & ~np.isfinite(values) | (values.isna() & frame[col].notna())
        if col in FRACTIONS:
            bad |= (values < 0) | (values > 1)
        if col in COUNTS:
            bad |= values.notna() & ((values < 1) | (values > 2 ** 31) | (values != values.round()))
        want = ("a fraction in [0, 1] or empty" if col in FRACTIONS else
                "a whole number in 1..2**31" if col in COUNTS else "a finite number or empty")
        if bad.any():
            raise GbError(f"{path}: not a gb table ({col} holds {quoted(str(frame[col][bad].iloc[0]), 40)}, "
                          f"{want} expected)")


def rich_table(table, title: str, columns: list[str]):
    """A rich Table of the chosen columns of a Rows or DataFrame: numbers right-aligned, floats to 4
    digits; cells as plain text (no rich markup), non-printable characters escaped (no escape sequences)."""
    from rich.table import Table
    from rich.text import Text

    rows = Rows.of(table)
    out = Table(title=Text(printable(title)))
    cols = [c for c in columns if c in rows.columns]
    for c in cols:
        out.add_column(Text(printable(c)), justify="left" if rows.kind(c) == "object" else "right")
    for cells in zip(*(rows.cells(c, number=lambda v: f"{v:.4g}") for c in cols)):
        out.add_row(*[Text(printable(v)) for v in cells])
    return out


def pair_key(errors: pd.DataFrame, incons: pd.DataFrame) -> list[str]:
    """Columns that identify a grid point in both tables: `point` (sweeps), else config + seeds."""
    if "point" in errors.columns and "point" in incons.columns:
        return ["point"]
    return [k for k in CONFIG_KEYS + SEED_KEYS if k != "predictor"]


def summarize(errors: pd.DataFrame, incons: pd.DataFrame) -> pd.DataFrame:
    """Mean and std (ddof=1) over seeds of every configuration's errors and inconsistency, over its usable
    rows (ok, optimal, inaccurate); n_seeds counts every row, n_failed the others. GD: no inconsistency."""
    import numpy as np

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
    """One line per predictor (and momentum, when it varies): points, how many certified infeasible, mean
    train and validation error (over the solved points), mean inconsistency with the GD network."""
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
