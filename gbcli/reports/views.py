"""What a view of many rows must show so that two rows that differ do not look the same: the keys that
vary between a sweep's points (rows of its `tables/points.csv`), as columns beside the results (`gb
compare`) and as one line (`gb runs`); a table without points shows its own varying configuration columns.
"""

from __future__ import annotations

from gbcli.reports.tables import CONFIG_COLUMNS, Rows


def short_names(keys: list[str]) -> dict[str, str]:
    """Each dotted key by its last part (`training.momentum` -> `momentum`), whole where two end alike."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (tail if last.count(tail) == 1 else k) for k, tail in zip(keys, last)}


def with_axes(table, points: list[dict], shown: list[str]) -> tuple[Rows, list[str]]:
    """`table` (Rows or DataFrame) as Rows with one column per grid axis (by short name), and the columns to
    show: point, the axes, `shown`, and any varying configuration column `shown` leaves out."""
    out = Rows.of(table)
    keys = list(dict.fromkeys(k for p in points for k in p if k not in ("point", "name")))
    axes = [k for k in keys if len({repr(p.get(k)) for p in points}) > 1]   # the dotted keys that vary, in order
    names = short_names(axes)
    if axes and "point" in out.columns:
        by_point = {str(p["point"]): p for p in points}
        drop = {names[k] for k in axes}
        out = Rows([{**{c: v for c, v in r.items() if c not in drop},
                     **{names[k]: by_point.get(str(r["point"]), {}).get(k) for k in axes}} for r in out.rows],
                   [c for c in out.columns if c not in drop] + [names[k] for k in axes])
    lead = ["point"] if "point" in out.columns else []
    axis_columns = [names[k] for k in axes if names[k] in out.columns]

    def told(c: str) -> bool:   # a column the axes decide (contexts.seed decides context_seed) adds nothing
        seen: dict[tuple, set] = {}
        for r in out.rows:
            seen.setdefault(tuple(repr(r[a]) for a in axis_columns), set()).add(repr(r[c]))
        return bool(axis_columns) and all(len(v) <= 1 for v in seen.values())

    def varies(c: str) -> bool:
        return len(set(out.cells(c))) > 1

    varying = [c for c in CONFIG_COLUMNS if c in out.columns and c not in shown and c not in axis_columns
               and varies(c) and not told(c)]
    # in a sweep's view a configuration column that is one value for every row tells no row apart
    rest = [c for c in shown if c not in lead and c not in axis_columns
            and not (axis_columns and c in CONFIG_COLUMNS and not varies(c))]
    return out, lead + axis_columns + varying + rest


def grid_line(axes: dict[str, list]) -> str:
    """A sweep's axes as one line for a listing: `grid: seed 1,2; momentum 0,0.9`."""
    names = short_names(list(axes))
    return "grid: " + "; ".join(f"{names[k]} {','.join(f'{v:g}' if isinstance(v, float) else str(v) for v in values)}"
                                for k, values in axes.items())


def by_field(results: dict[str, dict]) -> list[dict]:
    """{stage: {field: value}} as a row per field, a column per stage: no header cut mid-word (`gb runs show`)."""
    fields = list(dict.fromkeys(k for rec in results.values() for k in rec))
    return [{"": f, **{stage: rec.get(f) for stage, rec in results.items()}} for f in fields]
