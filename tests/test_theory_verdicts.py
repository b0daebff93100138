"""Issue 36: the claims tables of results/theory/paper-000.md ... paper-004.md give their verdicts in the
vocabulary of scripts/claims.py (VERDICTS, plus "not run" for a statement not tested), in bold, lower case.

A row's verdicts are the bold phrases of its last cell (the 'here' column) that are one of those words.
A bold phrase that reads like a verdict (it mentions reproduction, decision or contradiction) must be
exactly one of them, so a retired word such as **partly reproduced** or **Reproduced** fails the test."""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))  # scripts/: the lab code, outside the package
from claims import VERDICTS  # noqa: E402

THEORY = Path(__file__).resolve().parents[1] / "results" / "theory"
ALLOWED = (*VERDICTS, "not run")
RETIRED = ("partly reproduced", "reproduced in substance", "not reproduced", "partly", "reproduced as an approach",
           "reproduced below")
VERDICT_LIKE = re.compile(r"reproduc|decided|contradict|mixed|not run", re.IGNORECASE)
BOLD = re.compile(r"\*\*(.+?)\*\*")
CELL = re.compile(r"(?<!\\)\|")          # a cell boundary; "\|" is a pipe inside a cell


def _claims_rows(text: str) -> list[str]:
    """The body rows of the table under '## Claims' (header and separator left out)."""
    section = text.split("\n## Claims\n", 1)[1].split("\n## ", 1)[0]
    table = [ln for ln in section.splitlines() if ln.startswith("|")]
    return [ln for ln in table[2:]]


def _problems(name: str, row: str) -> list[str]:
    cells = [c.strip() for c in CELL.split(row.strip())[1:-1]]
    label, here = cells[0], cells[-1]
    bold = [b.strip() for b in BOLD.findall(here)]
    out = []
    if len(cells) != 3:
        out.append(f"{name} {label}: {len(cells)} cells, not 3")
    if not any(b in ALLOWED for b in bold):
        out.append(f"{name} {label}: no bold verdict among {bold}")
    for b in bold:
        if any(r in b.lower() for r in RETIRED):
            out.append(f"{name} {label}: retired verdict **{b}**")
        elif VERDICT_LIKE.search(b) and b not in ALLOWED:
            out.append(f"{name} {label}: **{b}** is not one of {ALLOWED}")
    return out


def test_every_theory_claims_row_has_a_verdict_in_the_claims_vocabulary():
    problems, n_rows = [], 0
    for i in range(5):
        name = f"paper-00{i}.md"
        rows = _claims_rows((THEORY / name).read_text())
        prefix = "| GLN (000)" if i == 0 else f"| 00{i}"
        assert len(rows) >= 4 and all(r.startswith(prefix) for r in rows), name
        n_rows += len(rows)
        for row in rows:
            problems += _problems(name, row)
    assert n_rows >= 36, n_rows           # 4 + 6 + 11 + 6 + 9 rows when written
    assert not problems, "\n".join(problems)
    # the checker itself: a retired word in bold is caught, the vocabulary is not
    bad = "| 002 | claim | numbers: **partly reproduced** (falling) |"
    good = "| 002 | claim | numbers: **direction reproduced, size not** (falling); rest: **not run** |"
    assert _problems("x", bad) and not _problems("x", good)
