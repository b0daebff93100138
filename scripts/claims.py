"""A paper's claims as data, evaluated on result tables.

A claims file (YAML; results/paper/claims.yaml holds paper 000's) lists the tables it reads, named
row subsets, default parameters, the sizes its qualifiers are taken to mean, and the claims. A claim
has the paper's statement, a rule (`d < 0`: the claimed ordering; `d == 0`: equality) and conditions;
each condition is one of the named quantities of `QUANTITIES` with its parameters, and gives a number
d with a 95% interval and a verdict:

    claims = load("results/paper/claims.yaml")
    rows = evaluate(claims, read_tables(claims, "results/paper"))

Parameters of a condition besides its quantity's own: `label` (printed, and the seed of its bootstrap),
`size` (a name of the file's `sizes` or `{at_least: S}`: the claim says d <= -S, for a qualifier such
as "much worse"), `per: COLUMN` (one condition per value of the column, the label formatted with
`{COLUMN}`) and the rows (`rows`, or `a_rows` and `b_rows`): a subset's name, `{subset: NAME | from:
TABLE, COLUMN: FILTER, ...}` or a list of those, concatenated. A filter is a value (==), a list (in),
a comparison ("<= 50"), `min` or `max` (the column's extreme), or `drop_collapsed: GD` (the points
whose GD run GD collapsed, train error > 0.4, left out; momentum-0 rows kept). A condition on a
missing optional table is left out. A claim's `shown_conditions` are evaluated and printed but are
not part of its verdict (a breakdown, e.g. per H); `control_conditions` test what could rule out our
setup.

Only numpy, pandas, scipy (a t quantile) and yaml: the claims are read from tables, never from runs.
"""

from __future__ import annotations

import operator
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy import stats

VERDICTS = ("reproduced", "direction reproduced, size not", "mixed", "not decided", "contradicted")
SUPPORT = ("reproduced", "direction reproduced, size not")   # a condition that shows at least the direction
RULES = ("d < 0", "d == 0")
BOOT = 4000          # bootstrap resamples per condition
LEVEL = 0.95         # two-sided intervals
COLLAPSED = 0.4      # a GD run with a larger train error collapsed

METHOD = f"""Each claim is the paper's statement (its words, where it makes it) and one or more conditions. A
condition is a number d that the claim says is negative (d < 0), computed from the committed tables:
- a paired difference A - B averaged over grid points (one point = one configuration and seed; pairs
  only where both programs are feasible), or a level against the threshold the claim states
  (0.10 - inconsistency for "more than 10%");
- a best-configuration difference: for each side, the validation error is averaged over the seeds
  of each configuration and the configuration with the lowest mean is taken (as in Figure 2c / 3c;
  for the SVMs of Figure 3 over the seeds where the program is feasible);
- a Pearson correlation (-r for "correlated", r - 0.5 for "only weakly correlated"), or the slope of
  a gap against log2 H; or a share of points (equality: none).
Intervals ({LEVEL:.0%}; numpy, a fixed seed per condition): a percentile bootstrap of the points ({BOOT}
resamples) for paired means, correlations, slopes and shares. For a best configuration d's interval is
the smallest one holding two intervals: (1) a bootstrap that resamples the seeds of every configuration
and chooses the best configuration again in each resample (the two sides independently), so it counts
the chance that another configuration is the best one (it does not remove the optimism of a minimum,
which partly cancels in d as both sides are minima); (2) a Welch t-interval over the seeds of the two
chosen configurations, since a bootstrap of 3 seeds has few distinct resamples.
Sizes: a qualifier that claims a large difference ("much", "considerably") is a size S, written in the
claims file (`sizes`) with its reason: the claim is then d <= -S. A number the paper states ("more than
10%") is the claim's threshold itself, and so are its "a substantial proportion" (its own "a substantial
proportion (more than 10%)", sec. 4.1) and "only weakly correlated" (r < 0.5); "substantially different"
(sec. 5.2), for which the paper states no number, is the size S of a difference from 0. Hedges
("slightly", "a bit", "tends to", "reasonably") are tested for their direction only; the size is shown.
Verdict of a condition: **reproduced** if the whole interval is below 0 (below -S with a size);
**direction reproduced, size not** if it is below 0 but not below -S (its text says whether the size
is excluded or not decided); **contradicted** if the whole interval is above 0, or, with a size, above
-S while not below 0 (the stated size is excluded and the direction is not shown); **not decided**
otherwise (the interval contains 0). An equality condition is reproduced if every paired difference is
exactly 0, contradicted if the interval excludes 0. A claim is **reproduced** if all its conditions
are; **mixed** if one is contradicted while another reproduces at least the direction;
**contradicted** if one is and none reproduces anything; **direction reproduced, size not** if every
condition reproduces at least the direction; otherwise **not decided**. Subsets: Figure 2 = median
init, C = 2, momentum 0 (the comparison networks); Figure 4 = all of fig2; Figure 3 = momentum 0.9;
appendix C.2 = momentum 0.
The tally counts each of the paper's claims once: a row that is our reading rather than the paper's
statement, or that tests the same conditions as another row, is shown but not counted (its reason is
printed with the tally)."""


class Condition:
    """One evaluated condition: d (claimed < 0, <= -size with a size, or == 0 for equality), its
    interval and a verdict. `intervals` (name -> (lo, hi)): the intervals whose hull is [lo, hi]."""

    def __init__(self, label: str, est: float, lo: float, hi: float, detail: str = "", equal: bool = False,
                 exact_zero: bool | None = None, intervals: dict | None = None):
        self.label, self.est, self.lo, self.hi, self.detail = label, est, lo, hi, detail
        self.equal, self.exact_zero, self.intervals = equal, exact_zero, intervals or {}
        self.size, self.size_name = None, ""

    def with_size(self, size: float, name: str = "stated") -> "Condition":
        if not size > 0:
            raise ValueError(f"{self.label}: a size must be positive, not {size!r}")
        self.size, self.size_name = float(size), name
        return self

    @property
    def verdict(self) -> str:
        lo, hi = self.lo, self.hi
        if not np.isfinite(self.est):
            return "not decided"
        if self.equal:
            return "reproduced" if self.exact_zero else ("contradicted" if lo > 0 or hi < 0 else "not decided")
        if self.size is None:
            return "reproduced" if hi < 0 else ("contradicted" if lo > 0 else "not decided")
        if hi < -self.size:
            return "reproduced"
        if hi < 0:
            return "direction reproduced, size not"
        return "contradicted" if lo > -self.size else "not decided"

    def size_text(self, digits: int = 4) -> str:
        if self.size is None or not np.isfinite(self.est):
            return ""
        state = "shown" if self.hi < -self.size else ("excluded" if self.lo > -self.size else "not decided")
        return f"size '{self.size_name}': claimed d <= -{self.size:.{digits}f}, {state}"

    def text(self, digits: int = 4) -> str:
        if not np.isfinite(self.est):
            return f"{self.label}: no data ({self.detail})"
        f = lambda v: f"{v:+.{digits}f}"
        s = f"{self.label}: d = {f(self.est)} [{f(self.lo)}, {f(self.hi)}]"
        notes = [f"{k} [{f(a)}, {f(b)}]" for k, (a, b) in self.intervals.items()]
        notes += [t for t in (self.size_text(digits), self.detail) if t]
        return s + (f" ({'; '.join(notes)})" if notes else "")


def combine(conds: list[Condition]) -> str:
    """A claim's verdict from its conditions' (see METHOD)."""
    vs = [c.verdict for c in conds]
    if vs and all(v == "reproduced" for v in vs):
        return "reproduced"
    if "contradicted" in vs:
        return "mixed" if any(v in SUPPORT for v in vs) else "contradicted"
    if vs and all(v in SUPPORT for v in vs):
        return "direction reproduced, size not"
    return "not decided"


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
    with np.errstate(divide="ignore", invalid="ignore"):
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


def share_below(label: str, rows: pd.DataFrame, value: str, below: float, equal: bool = False) -> Condition:
    """d = the share of rows whose `value` is below `below` (with rule d == 0: the claim is that none is)."""
    v = rows[value].to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    hit = (v < below).astype(float)
    detail = f"{int(hit.sum())} of {len(hit)} below {below:g}; median {value} {np.median(v):.1e}" if len(v) else ""
    return mean_condition(label, hit, detail, equal=equal)


def corr(label: str, rows: pd.DataFrame, a: str, b: str, below: float | None = None) -> Condition:
    """The Pearson correlation r of two programs' errors over points: d = -r (the claim: they are
    correlated) or, with `below`, d = r - below (the claim: only weakly correlated, r < below)."""
    p = _by_point(rows)
    if a not in p or b not in p:
        return _none(label, f"{a} or {b} missing")
    p = p[[a, b]].dropna()
    x, y = p[a].to_numpy(), p[b].to_numpy()
    r = lambda ix: np.corrcoef(x[ix], y[ix])[0, 1]
    f = (lambda ix: r(ix) - below) if below is not None else (lambda ix: -r(ix))
    if len(p) < 3:
        return _none(label, "fewer than 3 points")
    rho = pd.Series(x).rank().corr(pd.Series(y).rank())
    claim = f"; the claim: r < {below:g}" if below is not None else ""
    return stat_condition(label, len(p), f, f"r = {r(np.arange(len(p))):.3f}, Spearman {rho:.3f}{claim}")


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


CONFIG = ["predictor", "hidden_units", "contexts", "median_init", "momentum"]   # a configuration (seeds vary)


def configurations(e: pd.DataFrame) -> dict:
    """A side's configurations: key (CONFIG) -> (its seeds' validation errors, model), infeasible seeds
    left out. A configuration that is the same program at another momentum (a convex program that
    does not read the network: the same error at every seed) is kept once."""
    e = e.dropna(subset=["val_error"])
    out, seen = {}, set()
    for key, g in e.groupby(CONFIG, sort=True):
        v = g.val_error.to_numpy(dtype=float)
        twin = (key[:4], tuple(np.sort(v)))
        if twin not in seen:
            seen.add(twin)
            out[key] = (v, g.model.iloc[0])
    return out


def _best_side(e: pd.DataFrame, names: dict, rng: np.random.Generator, reselect: bool = True):
    """The best configuration of a side (lowest mean over its seeds): its mean, name, seeds' errors and
    a bootstrap of the best mean. `reselect`: resample the seeds of every configuration and take the
    lowest mean again (the choice resampled); otherwise resample the chosen configuration's seeds only."""
    cfg = configurations(e)
    if not cfg:
        return float("nan"), "", np.full(BOOT, np.nan), np.array([])
    keys = list(cfg)
    means = np.array([cfg[k][0].mean() for k in keys])
    b = keys[int(np.argmin(means))]
    v, model = cfg[b]
    draw = lambda x: x[rng.integers(0, len(x), (BOOT, len(x)))].mean(1)
    boot = np.min([draw(cfg[k][0]) for k in keys], axis=0) if reselect else draw(v)
    m = f" m {b[4]:g}" if b[0].startswith("gd-") and e.momentum.nunique() > 1 else ""
    at = names.get(model, "{predictor} H={hidden_units}").format(
        predictor=b[0], hidden_units=b[1], contexts=b[2], log2_contexts=round(np.log2(b[2])), m=m)
    return float(means.min()), f"{at}, {len(v)} seeds", boot, v


def welch(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """The Welch t-interval of mean(a) - mean(b) (unbounded with fewer than 2 values on a side)."""
    if len(a) < 2 or len(b) < 2:
        return -np.inf, np.inf
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    d, se = a.mean() - b.mean(), np.sqrt(va + vb)
    if se == 0:
        return float(d), float(d)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    q = stats.t.ppf(1 - (1 - LEVEL) / 2, df)
    return float(d - q * se), float(d + q * se)


def best(label: str, a_rows: pd.DataFrame, b_rows: pd.DataFrame, names: dict | None = None,
         reselect: bool = True) -> Condition:
    """d = best(a) - best(b); `names`: how a configuration is named, by the table's model column. The
    interval holds the bootstrap with the choice of configuration redone in each resample (`reselect`)
    and the Welch t-interval over the chosen configurations' seeds."""
    ba, at_a, boot_a, va = _best_side(a_rows, names or {}, _rng(label, "a"), reselect)
    bb, at_b, boot_b, vb = _best_side(b_rows, names or {}, _rng(label, "b"), reselect)
    if not np.isfinite(ba - bb):
        return _none(label, "no feasible configuration on a side")
    blo, bhi = _pct(boot_a - boot_b)
    tlo, thi = welch(va, vb)
    boot_name = "bootstrap, best re-chosen" if reselect else "bootstrap of the chosen seeds"
    return Condition(label, ba - bb, min(blo, tlo), max(bhi, thi), f"{ba:.4f} ({at_a}) vs {bb:.4f} ({at_b})",
                     intervals={boot_name: (blo, bhi), "t over seeds": (tlo, thi)})


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


QUANTITIES = {f.__name__: f for f in (paired, paired_by, threshold, columns, share_below, corr, corr_diff, slope,
                                      unpaired, best, published_cells)}


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


def size_of(spec, claims: dict) -> tuple[float, str]:
    """A condition's `size`: a name of the claims file's `sizes`, or `{at_least: S}` (named 'stated')."""
    if isinstance(spec, str):
        if spec not in claims.get("sizes", {}):
            raise ValueError(f"size {spec!r} is not one of the claims file's sizes")
        return float(claims["sizes"][spec]["at_least"]), spec
    return float(spec["at_least"]), spec.get("name", "stated")


def conditions(specs: list[dict], tables: dict, claims: dict, equal: bool = False) -> list[Condition]:
    """Evaluate a list of condition specs."""
    out = []
    for spec in specs:
        spec = {**claims.get("defaults", {}).get(spec["quantity"], {}), **spec}
        fn, label, per = QUANTITIES[spec.pop("quantity")], spec.pop("label"), spec.pop("per", None)
        size = spec.pop("size", None)
        frames = {k: select(tables, claims.get("subsets", {}), spec.pop(k)) for k in list(spec)
                  if k == "rows" or k.endswith("_rows")}
        if any(f is None for f in frames.values()):
            continue
        if equal:
            spec["equal"] = True
        if per is None:
            found = [fn(label, **frames, **spec)]
        else:
            found = [fn(label.format(**{per: v}), **{k: f[f[per] == v] for k, f in frames.items()}, **spec)
                     for v in sorted(set().union(*(f[per].unique() for f in frames.values())))]
        out += [c.with_size(*size_of(size, claims)) if size is not None else c for c in found]
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


def _same_test(q: dict) -> tuple:
    """What a condition tests, its label (a name, and the bootstrap's seed) left out."""
    return tuple(sorted((k, repr(v)) for k, v in q.items() if k != "label"))


def check_tally(claims: dict) -> None:
    """The tally counts each of the paper's claims once: a claim that is not the paper's (our own
    reading) or that tests the same conditions as another is marked `counted: false` with a `why`;
    two counted claims with the same conditions are refused (ValueError naming both)."""
    seen: dict[tuple, str] = {}
    for c in claims["claims"]:
        if c.get("counted", True) is False:
            if not c.get("why_not_counted"):
                raise ValueError(f"claim {c['id']}: counted: false needs a why_not_counted")
            continue
        key = tuple(_same_test(q) for q in c["conditions"])
        if key in seen:
            raise ValueError(f"claims {seen[key]} and {c['id']} test the same conditions: the tally would count one "
                             f"test twice (mark one `counted: false` with a why_not_counted)")
        seen[key] = c["id"]


def tally(rows: list[dict]) -> tuple[dict[str, int], list[dict]]:
    """The verdicts of the claims that count (each of the paper's claims once: `check_tally`), by
    verdict in VERDICTS' order, and the rows left out of it."""
    counted = [r for r in rows if r.get("counted", True) is not False]
    return {v: sum(r["verdict"] == v for r in counted) for v in VERDICTS}, [r for r in rows if r not in counted]


def tally_line(rows: list[dict]) -> str:
    """The tally as the claims table ends with it: what counts, and what is left out and why."""
    counts, left = tally(rows)
    line = f"{sum(counts.values())} claims of the paper: " + ", ".join(f"{k}: {n}" for k, n in counts.items())
    if left:
        line += ". Not counted (shown above): " + "; ".join(f"{r['id']} ({r['why_not_counted']})" for r in left)
    return line


def load(path: str | Path) -> dict:
    claims = yaml.safe_load(Path(path).read_text())
    for name, s in claims.get("sizes", {}).items():
        if not float(s.get("at_least", 0)) > 0 or not s.get("why"):
            raise ValueError(f"size {name!r}: needs at_least > 0 and a why")
    for c in claims["claims"]:
        if c["rule"] not in RULES:
            raise ValueError(f"claim {c['id']}: rule {c['rule']!r} is not one of {RULES}")
        for q in c["conditions"] + c.get("shown_conditions", []) + c.get("control_conditions", []):
            if "size" in q:
                size_of(q["size"], claims)
    check_tally(claims)
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
    """Every claim with its conditions, verdict, published number, the conditions only shown and
    (where defined) its control."""
    rows = []
    for c in claims["claims"]:
        equal = c["rule"] == "d == 0"
        conds = conditions(c["conditions"], tables, claims, equal)
        rows.append({**c, "published": published(c.get("published", "figure only"), tables, claims), "conds": conds,
                     "verdict": combine(conds),
                     "shown_conds": conditions(c.get("shown_conditions", []), tables, claims, equal),
                     "control_conds": conditions(c.get("control_conditions", []), tables, claims, equal)})
    return rows
