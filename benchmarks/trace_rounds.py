"""Summarize the log of `benchmarks/fullscale_solve.py --trace` as one markdown row per working-set round.

    python benchmarks/trace_rounds.py LOG

Columns: the round, its working set, iterates and seconds (the solver's round line), the first
iterate's dual bound and smallest margin (how far the start is from the round's answer), the first
iterate with a positive margin on the working set, and the largest dual bound of the round (its
optimum when the round finished). A round still running at the end of the log gets a last row.
"""

from __future__ import annotations

import argparse
import re


def main(path: str) -> None:
    rows, current = [], []
    with open(path) as log:
        for line in log:
            if "iterate n=" in line:
                current.append(dict(kv.split("=", 1) for kv in line.split()[1:]))
            elif "working set round" in line and current:
                m = re.search(r"round (\d+): (\d+) of \d+ points, (\d+) Newton steps, ([\d.]+) s", line)
                rows.append((m[1], m[2], m[3], f"{float(m[4]):.0f}", current))
                current = []
    print("| round | working set | iterates | s | first iterate: dual, min margin | first positive margin at | largest dual |")
    print("|---|---|---|---|---|---|---|")
    for rnd, size, its, sec, its_log in rows + ([(f"{len(rows) + 1} (running)", current[-1]["n"],
                                                  f"{current[-1]['it']} so far", "", current)] if current else []):
        first = next((d["it"] for d in its_log if float(d["min_margin"]) > 0), "none")
        top = max(float(d["dual"]) for d in its_log)
        print(f"| {rnd} | {size} | {its} | {sec} | {float(its_log[0]['dual']):.3g}, {float(its_log[0]['min_margin']):.3g} "
              f"| {first} | {top:.4g} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="One table row per working-set round of a traced solve's log.")
    parser.add_argument("log", help="the output of benchmarks/fullscale_solve.py --trace")
    main(parser.parse_args().log)
