"""Error and inconsistency tables of a run directory (protocol section 7).

- errors: one row per predictor (the GD network and every solved program);
- inconsistency: one row per (convex predictor, GD predictor) pair: the fraction of validation
  points on which sign(f_a) != sign(f_b), next to 2p(1-p), the inconsistency expected of an
  uncorrelated predictor with the GD network's validation error p.
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
INCONSISTENCY_COLUMNS = ["predictor_a", "predictor_b", "inconsistency", "gd_val_error", "svm_val_error",
                         "expected_if_uncorrelated", "published_inconsistency", "model", "hidden_units", "contexts", "train_size",
                         "data_seed", "context_seed", "init_seed", "median_init", "momentum", "gd_status"]


def _null(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _kind(v) -> str:
    name = type(v).__name__   # numpy's scalars by name: numpy is not imported for a table of Python values
    if isinstance(v, bool) or name == "bool_":
        return "object"
    if isinstance(v, int) or name.startswith(("int", "uint")):
        return "int"
    if isinstance(v, float) or name.startswith("float"):
        return "float"
    return "object"


class Rows:
    """A table as rows of dicts, typed by column as pandas types a DataFrame of the same rows: `int`
    (whole numbers, none missing), `float` (numbers with any missing or fractional), `object` (text,
    flags, mixed); its CSV is byte for byte `DataFrame(rows).reindex(columns=...).to_csv(index=False)`
    (tests/test_views.py checks it against pandas). Written here rather than taken from pandas
    because importing pandas costs about half a CPU second, more than a reading command such as
    `gb compare RUN` may spend in all (issue 49); `frame()` gives the DataFrame for the library API."""

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
    """A CSV table of a run directory (read as `read_untrusted`: no link followed, size-bounded) as
    Rows, without pandas (the listings `gb runs` and `gb runs show`). ValueError (or OSError,
    UnicodeDecodeError) when it is not a table: empty, or a row longer than the header."""
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
    """inconsistency.csv, then errors.csv: a sweep counts a point as done when errors.csv exists, so
    it must come last (a kill -9 between the two once left a "done" point without its
    inconsistency table, and the resumed sweep failed on it)."""
    out = RunDir(out_dir).tables
    write_csv(out / layout.INCONSISTENCY, incons)
    write_csv(out / layout.ERRORS, errors)


def check_tables_dir(out_dir: str | Path) -> None:
    """Refuse (GbError) a RUN/tables that is there but not a folder (a file of the user's): gb writes
    its tables into it, so a command that would write them asks this before writing anything."""
    out = RunDir(out_dir).tables
    if present(out) and not is_dir(out):
        raise GbError(f"{out}: not a directory (gb writes its tables into this folder; move the file away)")


REQUIRED_COLUMNS = {"errors": ["predictor", "model", "hidden_units", "contexts", "train_size", "median_init",
                               "momentum", "train_error", "val_error", "status"],
                    "inconsistency": ["predictor_a", "predictor_b", "inconsistency", "gd_val_error",
                                      "expected_if_uncorrelated"]}


def read_tables(out_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The error and inconsistency tables written by `compare` or `sweep` (GbError when missing)."""
    import pandas as pd

    frames = []
    for name, file in (("errors", layout.ERRORS), ("inconsistency", layout.INCONSISTENCY)):
        path = RunDir(out_dir).tables / file
        if not is_file(path):
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
        _check_values(frame, path)
        frames.append(frame)
    return frames[0], frames[1]


def read_failures(out_dir: str | Path) -> list[str]:
    """The points a sweep's tables/failures.csv lists as not done, as `point (status)`; a missing
    file lists none (a sweep written before it existed), an unreadable one is a GbError."""
    path = RunDir(out_dir).tables / layout.FAILURES
    if not is_file(path):
        return []
    import pandas as pd

    try:
        frame = read_csv_untrusted(path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        return []
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError, OSError) as exc:
        raise GbError(f"{path}: not a gb table ({type(exc).__name__})") from None
    if not {"point", "status"} <= set(frame.columns):
        raise GbError(f"{path}: not a gb failures table (missing columns point, status)")
    return [f"point {p} ({s or 'failed'})" for p, s in zip(frame["point"], frame["status"])]


FRACTIONS = ("train_error", "val_error", "inconsistency", "expected_if_uncorrelated", "gd_val_error", "svm_val_error")
FINITE = ("objective", "rel_gap", "solve_seconds")
COUNTS = ("hidden_units", "contexts", "train_size")   # sizes of a configuration: whole numbers in 1..2**31


def _check_values(frame: pd.DataFrame, path: Path) -> None:
    """A received table's numbers are what gb writes: errors and inconsistencies in [0, 1] or empty,
    objectives, gaps and times finite or empty (a value near 1e308 would break the figures' axes)."""
    import numpy as np
    import pandas as pd

    for col in (*FRACTIONS, *FINITE):
        if col not in frame.columns:
            continue
        values = pd.to_numeric(frame[col], errors="coerce")
        bad = values.notna() & ~np.isfinite(values) | (values.isna() & frame[col].notna())
        if col in FRACTIONS:
            bad |= (values < 0) | (values > 1)
        if bad.any():
            raise GbError(f"{path}: not a gb table ({col} holds {quoted(str(frame[col][bad].iloc[0]), 40)}, "
                          f"{'a fraction in [0, 1]' if col in FRACTIONS else 'a finite number'} or empty expected)")
    for col in COUNTS:
        if col not in frame.columns:
            continue
        values = pd.to_numeric(frame[col], errors="coerce")
        bad = frame[col].notna() & ~(values.notna() & np.isfinite(values) & (values >= 1) & (values <= 2 ** 31)
                                     & (values == values.round()))
        if bad.any():
            raise GbError(f"{path}: not a gb table ({col} holds {quoted(str(frame[col][bad].iloc[0]), 40)}, "
                          f"a whole number in 1..2**31 expected)")


def rich_table(table, title: str, columns: list[str]):
    """A rich Table of the chosen columns of a Rows or DataFrame: numbers right-aligned, floats to 4
    significant digits. Every cell and the title are plain text (no rich markup: a run named `m[/b]`
    is shown as it is) with non-printable characters escaped (a folder name holding an escape
    sequence cannot clear the screen)."""
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
