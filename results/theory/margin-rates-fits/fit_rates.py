"""Issue 27: which decay law does the margin gap of margin-rates/ follow? Fits, on every run of
margin-rates/tables/training.csv and over several windows of steps t:

  power      log gap = a + b log t           (2 parameters; b is the README's "slope")
  c/ln t     gap = c / ln t                  (1 parameter: the shape of paper 004's O(ln n / ln t) bound)
  a + c/ln t gap = a + c / ln t              (2 parameters, least squares on the gap itself)
  (ln t)^b   log gap = a + b log ln t        (2 parameters)

Every residual is reported as log(fitted) - log(measured), so the four are comparable: rms and
max over the window. Writes tables/fits.csv next to this file and prints it.

    python results/theory/margin-rates-fits/fit_rates.py results/theory/margin-rates
"""
import sys
from pathlib import Path

import numpy as np
import pandas as pd

WINDOWS = [(1e3, 1e5), (1e3, 2.5e4), (3e4, 1e5)]


def fits(t: np.ndarray, g: np.ndarray) -> list[dict]:
    y, lt, n = np.log(g), np.log(t), len(t)
    out = []

    def row(law, params, fitted_log):
        r = fitted_log - y
        out.append({"law": law, **params, "rms_log_residual": float(np.sqrt(np.mean(r ** 2))),
                    "max_log_residual": float(np.abs(r).max())})

    (a, b), *_ = np.linalg.lstsq(np.c_[np.ones(n), lt], y, rcond=None)
    row("power", {"a": a, "b": b}, a + b * lt)
    logc = float(np.mean(y + np.log(lt)))
    row("c/ln t", {"a": 0.0, "b": np.exp(logc)}, logc - np.log(lt))
    (a, c), *_ = np.linalg.lstsq(np.c_[np.ones(n), 1 / lt], g, rcond=None)
    pred = a + c / lt
    row("a + c/ln t", {"a": a, "b": c}, np.log(np.where(pred > 0, pred, np.nan)) if (pred > 0).all()
        else np.full(n, np.nan))
    (a, b), *_ = np.linalg.lstsq(np.c_[np.ones(n), np.log(lt)], y, rcond=None)
    row("(ln t)^b", {"a": a, "b": b}, a + b * np.log(lt))
    return out


def main(sweep: str) -> None:
    d = pd.read_csv(Path(sweep) / "tables" / "training.csv")
    rows = []
    for run, m in d.groupby("run"):
        for lo, hi in WINDOWS:
            w = m[(m["step"] >= lo) & (m["step"] <= hi) & (m["margin_gap"] > 0)]
            t, g = w["step"].to_numpy(float), w["margin_gap"].to_numpy(float)
            for f in fits(t, g):
                rows.append({"run": run, "t_from": int(lo), "t_to": int(hi), "points": len(t), **f})
    out = pd.DataFrame(rows)
    dest = Path(__file__).resolve().parent / "tables" / "fits.csv"
    out.to_csv(dest, index=False)
    with pd.option_context("display.width", 200, "display.max_rows", 100):
        print(out.round(4).to_string(index=False))
    # gap x ln t along the constant-step run: constant if the gap is c / ln t
    m = d[d["run"].str.contains("constant")]
    m = m[m["step"] >= 1e3]
    print("\nconstant step, gap x ln t:")
    print(pd.DataFrame({"step": m["step"], "gap": m["margin_gap"],
                        "gap_x_ln_t": m["margin_gap"] * np.log(m["step"])}).round(5).to_string(index=False))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "results/theory/margin-rates")
