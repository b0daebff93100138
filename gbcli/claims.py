"""A paper's claims as data, evaluated on result tables.

A claims file (YAML; results/paper/claims.yaml holds paper 000's) lists the tables it reads, named
row subsets, default parameters and the claims. A claim has a statement, a rule (`d < 0`: the claimed
ordering; `d == 0`: equality) and conditions; each condition is one of the named quantities of
`QUANTITIES` with its parameters, and gives a number d with a bootstrap interval and a verdict:

    claims = load("results/paper/claims.yaml")
    rows = evaluate(claims, read_tables(claims, "results/paper"))

Parameters of a condition besides its quantity's own: `label` (printed, and the seed of its bootstrap),
`per: COLUMN` (one condition per value of the column, the label formatted with `{COLUMN}`) and the rows
(`rows`, or `a_rows` and `b_rows`): a subset's name, `{subset: NAME | from: TABLE, COLUMN: FILTER, ...}`
or a list of those, concatenated. A filter is a value (==), a list (in), a comparison ("<= 50"), `min`
or `max` (the column's extreme), or `drop_collapsed: GD` (the points whose GD run GD collapsed, train
error > 0.4, left out; momentum-0 rows kept). A condition on a missing optional table is left out.

Only numpy, pandas and yaml: the claims are read from tables, never from runs.
"""

from __future__ import annotations

import operator
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

VERDICTS = ("reproduced", "not reproduced", "contradicted")
RULES = ("d < 0", "d == 0")
BOOT = 4000          # bootstrap resamples per condition
LEVEL = 0.95         # two-sided percentile interval
COLLAPSED = 0.4      # a GD run with a larger train error collapsed

METHOD = f"""Each claim is one or more conditions. A condition is a number d that the claim says is
negative (d < 0), computed from the committed tables:
- a paired difference A - B averaged over grid points (one point = one configuration and seed; pairs
  only where both programs are feasible);
- a best-configuration difference: for each side, the validation error is averaged over the seeds
  of each configuration and the configuration with the lowest mean is taken (as in Figure 2c / 3c;
  for the SVMs of Figure 3 over the seeds where the program is feasible);
- a difference of Pearson correlations, or the slope of a gap against log2 H.
The interval is the {LEVEL:.0%} percentile bootstrap interval of d ({BOOT} resamples, numpy, fixed
seed per condition): points are resampled with replacement for paired means, correlations and slopes;
for best configurations the seeds of the two chosen configurations are resampled, the two sides
independently (the choice of configuration is not resampled). Verdict of a condition: **reproduced** if the whole interval is below 0 (the claimed
ordering holds), **contradicted** if the whole interval is above 0 (the opposite ordering holds),
**not reproduced** if the interval contains 0 (the data do not decide), and for an equality claim
reproduced if every paired difference is exactly 0. A claim is reproduced if all its conditions are,
contradicted if any is, and otherwise not reproduced. Qualifiers such as "much" or "slightly" are not
tested: only the direction is, and the size is shown. Subsets: Figure 2 = median init, C = 2, momentum 0
(the comparison networks); Figure 4 = all of fig2; Figure 3 = momentum 0.9; appendix C.2 = momentum 0."""


class Condition:
    """One evaluated condition: d (claimed < 0, or == 0 for equality), its interval and a verdict."""

    def __init__(self, label: str, est: float, lo: float, hi: float, detail: str = "", equal: bool = False,
                 exact_zero: bool | None = None):
        self.label, self.est, self.lo, self.hi, self.detail = label, est, lo, hi, detail
        if not np.isfinite(est):
            self.verdict = "not reproduced"
        elif equal:
            self.verdict = "reproduced" if exact_zero else ("contradicted" if lo > 0 or hi < 0 else "not reproduced")
        elif hi < 0:
            self.verdict = "reproduced"
        elif lo > 0:
            self.verdict = "contradicted"
        else:
            self.verdict = "not reproduced"

    def text(self, digits: int = 4) -> str:
        if not np.isfinite(self.est):
            return f"{self.label}: no data ({self.detail})"
        s = f"{self.label}: d = {self.est:+.{digits}f} [{self.lo:+.{digits}f}, {self.hi:+.{digits}f}]"
        return s + (f" ({self.detail})" if self.detail else "")


def combine(conds: list[Condition]) -> str:
    """A claim's verdict: reproduced if all its conditions are, contradicted if any is."""
    vs = [c.verdict for c in conds]
    if vs and all(v == "reproduced" for v in vs):
        return "reproduced"
    return "contradicted" if "contradicted" in vs else "not reproduced"


def _none(label: str, why: str) -> Condition:
    return Condition(label, float("nan"), float("nan"), float("nan"), why)


def _rng(*key) -> np.random.Generator:
    return np.random.default_rng([27, zlib.crc32("|".join(map(str, key)).encode())])


def _pct(boot: np.ndarray) -> tuple[float, float]:
    a = (1 - LEVEL) / 2
    return float(np.quantile(boot, a)), float(np.quantile(boot, 1 - a))


def mean_condition(label: str, d, detail: str = "", equal: bool = False) -> Condition:
    """Paired differences: bootstrap the mean over points."""
    d = np.asarray(d, dtype=float)
    d = d[np.isfinite(d)]
    if len(d) == 0:
        return _none(label, "no points where both are feasible")
    idx = _rng(label, detail, len(d)).integers(0, len(d), (BOOT, len(d)))
    lo, hi = _pct(d[idx].mean(1))
    detail = f"{len(d)} points" + (f"; {detail}" if detail else "")
    return Condition(label, float(d.mean()), lo, hi, detail, equal=equal, exact_zero=bool(np.all(d == 0)))


def stat_condition(label: str, n: int, stat, detail: str) -> Condition:
    """Any statistic of resampled point indices (correlations, slopes)."""
    if n < 3:
        return _none(label, "fewer than 3 points")
    rng = _rng(label, detail, n)
    boot = np.array([stat(rng.integers(0, n, n)) for _ in range(BOOT)])
    lo, hi = _pct(boot[np.isfinite(boot)])
    return Condition(label, float(stat(np.arange(n))), lo, hi, f"{n} points; {detail}")


def _program(t: pd.DataFrame) -> str:
    """The column naming the program: `predictor` (errors tables) or `predictor_a` (inconsistency)."""
    return "predictor" if "predictor" in t else "predictor_a"


def _by_point(rows: pd.DataFrame, value: str = "val_error") -> pd.DataFrame:
    return rows.pivot_table(index="point", columns=_program(rows), values=value)


# ------------------------------------------------------------------------------- the quantities

def paired(label: str, rows: pd.DataFrame, a: str, b: str, value: str = "val_error") -> Condition:
    """d = a - b at the same points (programs a and b of the rows, where both are feasible)."""
    p = _by_point(rows, value)
    if a not in p or b not in p:
        return _none(label, f"{a} or {b} missing")
    q = p[[a, b]].dropna()
    return mean_condition(label, q[a] - q[b], f"{q[a].mean():.4f} vs {q[b].mean():.4f}")


def paired_by(label: str, rows: pd.DataFrame, across: str, a, b, keys: list[str], value: str = "val_error",
              equal: bool = False) -> Condition:
    """d = value at `across` == a minus at `across` == b (e.g. momentum 0.9 - 0), paired by `keys`
    (several rows of one key and side are averaged)."""
    p = rows.pivot_table(index=keys, columns=across, values=value)
    if a not in p.columns or b not in p.columns:
        return _none(label, "no pairs")
    ok = p[a].notna() & p[b].notna()
    x, y = p[a][ok], p[b][ok]
    detail = f"largest difference {(x - y).abs().max():.1e}" if equal else f"{x.mean():.4f} vs {y.mean():.4f}"
    return mean_condition(label, x - y, detail, equal=equal)


def threshold(label: str, rows: pd.DataFrame, threshold: float, value: str) -> Condition:
    """d = threshold - value, over the rows (the claim: the value exceeds the threshold)."""
    s = rows[value]
    return mean_condition(label, threshold - s, f"mean {value} {s.mean():.4f}")


def columns(label: str, rows: pd.DataFrame, a: str, b: str) -> Condition:
    """d = column a - column b of the same rows."""
    return mean_condition(label, rows[a] - rows[b], f"{rows[a].mean():.4f} vs {rows[b].mean():.4f}")


def corr(label: str, rows: pd.DataFrame, a: str, b: str) -> Condition:
    """d = -r(a, b), the Pearson correlation of two programs' errors over points."""
    p = _by_point(rows)[[a, b]].dropna()
    x, y = p[a].to_numpy(), p[b].to_numpy()
    return stat_condition(label, len(p), lambda ix: -np.corrcoef(x[ix], y[ix])[0, 1], f"r = {np.corrcoef(x, y)[0, 1]:.3f}")


def corr_diff(label: str, rows: pd.DataFrame, a: str, b: str, ref: str) -> Condition:
    """d = r(a, ref) - r(b, ref) over points."""
    p = _by_point(rows)[[a, b, ref]].dropna()
    x, y, z = (p[c].to_numpy() for c in (a, b, ref))
    f = lambda ix: np.corrcoef(x[ix], z[ix])[0, 1] - np.corrcoef(y[ix], z[ix])[0, 1]
    r = lambda u: np.corrcoef(u, z)[0, 1]
    return stat_condition(label, len(p), f, f"r({a}, {ref}) = {r(x):.3f}, r({b}, {ref}) = {r(y):.3f}")


def slope(label: str, rows: pd.DataFrame, a: str, b: str) -> Condition:
    """d = -(slope of the paired gap a - b against log2 H): the claim is that the gap grows with H."""
    p = _by_point(rows)
    h = rows.drop_duplicates("point").set_index("point").hidden_units
    q = p[[a, b]].dropna()
    g, x = (q[a] - q[b]).to_numpy(), np.log2(h.loc[q.index].to_numpy().astype(float))
    f = lambda ix: -np.polyfit(x[ix], g[ix], 1)[0] if np.ptp(x[ix]) > 0 else np.nan
    means = pd.Series(g).groupby(h.loc[q.index].to_numpy()).mean()
    return stat_condition(label, len(q), f, f"gap {a} - {b} by H: " + ", ".join(f"{k}: {v:+.4f}" for k, v in means.items()))


def unpaired(label: str, a_rows: pd.DataFrame, b_rows: pd.DataFrame, value: str = "val_error") -> Condition:
    """d = mean(a) - mean(b) over different point sets (each side resampled on its own)."""
    a, b = a_rows[value].dropna().to_numpy(), b_rows[value].dropna().to_numpy()
    if len(a) == 0 or len(b) == 0:
        return _none(label, "no points")
    rng = _rng(label, len(a), len(b))
    boot = a[rng.integers(0, len(a), (BOOT, len(a)))].mean(1) - b[rng.integers(0, len(b), (BOOT, len(b)))].mean(1)
    lo, hi = _pct(boot)
    return Condition(label, float(a.mean() - b.mean()), lo, hi, f"{a.mean():.4f} on {len(a)} points vs {b.mean():.4f} on {len(b)}")


def _best_boot(e: pd.DataFrame, names: dict, rng: np.random.Generator):
    """The best configuration (lowest validation error averaged over its seeds; infeasible seeds left
    out), its name and the bootstrap of its seed mean (its seeds resampled, the choice kept)."""
    keys = ["predictor", "hidden_units", "contexts", "median_init", "momentum"]
    e = e.dropna(subset=["val_error"])
    if e.empty:
        return float("nan"), "", np.full(BOOT, np.nan)
    m = e.groupby(keys).val_error.mean()
    b = m.idxmin()
    runs = e.set_index(keys).loc[b]
    v = runs.val_error.to_numpy()
    boot = v[rng.integers(0, len(v), (BOOT, len(v)))].mean(1)
    at = names.get(runs.model.iloc[0], "{predictor} H={hidden_units}").format(
        predictor=b[0], hidden_units=b[1], contexts=b[2], log2_contexts=round(np.log2(b[2])))
    return float(m.min()), f"{at}, {len(v)} seeds", boot


def best(label: str, a_rows: pd.DataFrame, b_rows: pd.DataFrame, names: dict | None = None) -> Condition:
    """d = best(a) - best(b); `names`: how a configuration is named, by the table's model column."""
    ba, at_a, boot_a = _best_boot(a_rows, names or {}, _rng(label, "a"))
    bb, at_b, boot_b = _best_boot(b_rows, names or {}, _rng(label, "b"))
    lo, hi = _pct(boot_a - boot_b) if np.isfinite(ba - bb) else (float("nan"), float("nan"))
    return Condition(label, ba - bb, lo, hi, f"{ba:.4f} ({at_a}) vs {bb:.4f} ({at_b})")


def published_cells(rows: pd.DataFrame, value: str, cells: list[str], ours_rows: pd.DataFrame | None = None,
                    ours: str | None = None) -> str:
    """Text: the published runs' svm-gln (their program, measured their way) averaged over `rows` of
    the published table, and our `ours` column of `ours_rows` on the same cells (matched on `cells`)."""
    s = rows.assign(inconsistency=1 - rows.agreement_with_gd)
    if s.empty:
        return ""
    out = f"published runs (their svm-gln, measured their way): {value.replace('_', ' ')} {s[value].mean():.4f} over {len(s)} cells"
    if ours:
        out += f"; ours, svm-gln-reference on the same cells: {s[cells].merge(ours_rows, on=cells)[ours].mean():.4f}"
    return out


QUANTITIES = {f.__name__: f for f in (paired, paired_by, threshold, columns, corr, corr_diff, slope, unpaired, best,
                                      published_cells)}


# ------------------------------------------------------------------------------- rows and claims

_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "!=": operator.ne}


def select(tables: dict, subsets: dict, spec) -> pd.DataFrame | None:
    """The rows a spec names (None if one of its tables is missing)."""
    if isinstance(spec, list):
        parts = [select(tables, subsets, s) for s in spec]
        return None if any(p is None for p in parts) else pd.concat(parts)
    spec = {"subset": spec} if isinstance(spec, str) else dict(spec)
    if "subset" in spec:
        spec = {**subsets[spec.pop("subset")], **spec}
    source = spec.pop("from")
    t = tables[source]
    for col, want in spec.items():
        if t is None:
            return None
        if col == "drop_collapsed":
            e = tables[source.split("/")[0] + "/errors"]
            ok = e[(e.predictor == want) & (e.train_error <= COLLAPSED)].point
            t = t[t.point.isin(ok) | (t.momentum == 0)]
        elif isinstance(want, list):
            t = t[t[col].isin(want)]
        elif want in ("min", "max"):
            t = t[t[col] == getattr(t[col], want)()]
        elif isinstance(want, str) and want[:1] in ("<", ">", "!"):
            op, v = want.split()
            t = t[_OPS[op](t[col], float(v))]
        else:
            t = t[t[col] == want]
    return t


def conditions(specs: list[dict], tables: dict, claims: dict, equal: bool = False) -> list[Condition]:
    """Evaluate a list of condition specs."""
    out = []
    for spec in specs:
        spec = {**claims.get("defaults", {}).get(spec["quantity"], {}), **spec}
        fn, label, per = QUANTITIES[spec.pop("quantity")], spec.pop("label"), spec.pop("per", None)
        frames = {k: select(tables, claims.get("subsets", {}), spec.pop(k)) for k in list(spec)
                  if k == "rows" or k.endswith("_rows")}
        if any(f is None for f in frames.values()):
            continue
        if equal:
            spec["equal"] = True
        if per is None:
            out.append(fn(label, **frames, **spec))
            continue
        for v in sorted(set().union(*(f[per].unique() for f in frames.values()))):
            out.append(fn(label.format(**{per: v}), **{k: f[f[per] == v] for k, f in frames.items()}, **spec))
    return out


def published(spec, tables: dict, claims: dict) -> str:
    """A claim's published number: text, or a quantity giving text (`prefix` + it, or `otherwise`)."""
    if not isinstance(spec, dict):
        return spec or "figure only"
    spec = {**claims.get("defaults", {}).get(spec["quantity"], {}), **spec}
    fn, prefix, otherwise = QUANTITIES[spec.pop("quantity")], spec.pop("prefix", ""), spec.pop("otherwise", "")
    frames = {k: select(tables, claims.get("subsets", {}), spec.pop(k)) for k in list(spec)
              if k == "rows" or k.endswith("_rows")}
    text = fn(**frames, **spec) if all(f is not None for f in frames.values()) else ""
    return prefix + (text or otherwise) or "figure only"


def load(path: str | Path) -> dict:
    claims = yaml.safe_load(Path(path).read_text())
    for c in claims["claims"]:
        if c["rule"] not in RULES:
            raise ValueError(f"claim {c['id']}: rule {c['rule']!r} is not one of {RULES}")
    return claims


def read_tables(claims: dict, base: str | Path) -> dict:
    """The claims file's tables under `base` (a missing required one is refused, an optional one is None)."""
    base, out = Path(base), {}
    for name, rel in claims["tables"].items():
        if not (base / rel).exists():
            raise SystemExit(f"claims: {(base / rel).parent} has no {Path(rel).name}")
        out[name] = pd.read_csv(base / rel)
    for name, rel in claims.get("optional_tables", {}).items():
        out[name] = pd.read_csv(base / rel) if (base / rel).exists() else None
    return out


def evaluate(claims: dict, tables: dict) -> list[dict]:
    """Every claim with its conditions, verdict, published number and (where defined) control."""
    rows = []
    for c in claims["claims"]:
        equal = c["rule"] == "d == 0"
        conds = conditions(c["conditions"], tables, claims, equal)
        rows.append({**c, "published": published(c.get("published", "figure only"), tables, claims), "conds": conds,
                     "verdict": combine(conds), "control_conds": conditions(c.get("control_conditions", []), tables, claims, equal)})
    return rows
