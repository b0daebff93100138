"""The package's structure: no import cycles (imports inside functions included), experiments build
on models and never the reverse, and no module outside a model kind's own module (and the
registry) branches on that kind."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gbcli.registry import MODELS

PACKAGE = Path(__file__).resolve().parents[1] / "gbcli"


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every gbcli module `name` imports, at module level or inside functions, resolved to the most
    specific module that exists (`from gbcli.x import y` is gbcli.x.y when y is a module)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rsplit(".", 1)[0] if "." in t else ""
            if t and t != name:
                found.add(t)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state and (c := visit(w)):
                return c
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (c := visit(v)):
            return c
    return None


def test_no_import_cycle_counting_imports_inside_functions():
    mods = modules()
    graph = {name: imports_of(name, path, set(mods)) for name, path in mods.items()}
    assert sum(len(v) for v in graph.values()) > 50      # the walk sees the imports
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_model_module_imports_the_experiments(tmp_path):
    """Dependency direction: gbcli.experiments builds on gbcli.models, never the reverse (imports
    inside functions included)."""
    mods = modules()
    known = set(mods)
    offenders = {name: sorted(i for i in imports_of(name, path, known)
                              if i == "gbcli.experiments" or i.startswith("gbcli.experiments."))
                 for name, path in mods.items() if name == "gbcli.models" or name.startswith("gbcli.models.")}
    assert len(offenders) > 5      # the walk sees the model modules
    assert not any(offenders.values()), {k: v for k, v in offenders.items() if v}
    # the walk itself sees such an import, at module level and inside a function
    probe = tmp_path / "probe.py"
    for source, found in (("from gbcli.experiments import paper001\n", "gbcli.experiments.paper001"),
                          ("def f():\n    import gbcli.experiments.paper003 as p\n", "gbcli.experiments.paper003")):
        probe.write_text(source)
        assert found in imports_of("gbcli.models.probe", probe, known)


def _kind_branches(tree: ast.AST, kinds: set[str]) -> list[str]:
    """Comparisons of something named `kind` with a kind's string (==, !=, in, not in)."""
    found = []

    def names_kind(node) -> bool:
        return any((isinstance(n, ast.Attribute) and n.attr == "kind") or (isinstance(n, ast.Name) and n.id == "kind")
                   or (isinstance(n, ast.Constant) and n.value == "kind") for n in ast.walk(node))

    def kind_constants(node) -> set[str]:
        return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in kinds}

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(names_kind(s) for s in sides) and any(kind_constants(s) for s in sides):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_branches_on_a_model_kind_outside_its_own_module():
    kinds = set(MODELS)
    mods = modules()
    offenders = []
    for name, path in mods.items():
        if name.startswith("gbcli.models.") or name == "gbcli.registry":
            continue
        offenders += [f"{name} {b}" for b in _kind_branches(ast.parse(path.read_text()), kinds)]
    assert not offenders, "\n".join(offenders)
    # the check itself finds such a branch
    assert _kind_branches(ast.parse('if cfg.model.kind in ("gln", "shallow"): pass'), kinds)


@pytest.mark.parametrize("kind", sorted(k for k in MODELS if k not in ("relu", "linear")))
def test_a_model_kind_string_appears_only_in_its_own_module(kind):
    """("relu" and "linear" are also activation names and axis scales, so they are covered by the
    branching test above instead.)"""
    files = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                   if any(isinstance(n, ast.Constant) and n.value == kind for n in ast.walk(ast.parse(p.read_text()))))
    own = str(Path(MODELS[kind].__module__.split(".", 1)[1].replace(".", "/") + ".py"))
    assert set(files) <= {own, "registry.py"}, files


# ------------------------------------------------------------------ the store owns the run directory

RECORD_NAMES = ("gb-run.json", ".gb.lock", ".sweep.lock", "log.txt", "failed.json", "config.yaml", "summary.json",
                "result.json", "metrics.csv", "model.pt", "predictions.npz", "compact.npz", "checkpoint.pt",
                "rounds.npz", "sweep.json", "errors.csv", "points.csv", "inconsistency.csv")
LINK_CHECKS = ("islink", "is_symlink", "O_NOFOLLOW", "lstat", "lexists", "follow_symlinks")


def _code_constants(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants that are not docstrings (documentation may name a file)."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            out.append((n.lineno, n.value))
        elif isinstance(n, ast.JoinedStr):   # the literal parts of an f-string
            out += [(n.lineno, v.value) for v in n.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    return out


def record_name_literals(source: str) -> list[str]:
    return [f"line {ln}: {v!r}" for ln, v in _code_constants(ast.parse(source)) if v in RECORD_NAMES]


def link_checks(source: str) -> list[str]:
    found = []
    for n in ast.walk(ast.parse(source)):
        name = n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else \
            n.arg if isinstance(n, ast.keyword) else None
        if name in LINK_CHECKS:
            found.append(f"line {n.lineno}: {name}")
    return found


def test_record_file_names_are_spelled_only_in_the_store():
    offenders = []
    for name, path in modules().items():
        if name.startswith("gbcli.store"):
            continue
        offenders += [f"{name} {hit}" for hit in record_name_literals(path.read_text())]
    assert not offenders, "\n".join(offenders)
    assert record_name_literals('p = run / "gd" / "summary.json"')          # the check sees one
    assert not record_name_literals('"""Reads gd/summary.json."""\nx = 1')  # docstrings may name them


def test_links_are_checked_only_in_the_safe_file_layer():
    offenders = []
    for name, path in modules().items():
        if name == "gbcli.store.safe":
            continue
        offenders += [f"{name} {hit}" for hit in link_checks(path.read_text())]
    assert not offenders, "\n".join(offenders)
    assert link_checks("import os\nos.path.islink(p)") and link_checks("p.is_symlink()")
    assert link_checks("os.open(p, os.O_RDONLY | os.O_NOFOLLOW)")


def message_decisions(source: str) -> list[str]:
    """Comparisons that read a message: `X in <...message...>`, `<...message...>.startswith/endswith(...)`,
    `<...message...> == X`, where the message is a name or attribute called message/msg/why."""
    def is_message(node) -> bool:
        return (isinstance(node, ast.Name) and node.id in ("message", "msg")) or \
            (isinstance(node, ast.Attribute) and node.attr in ("message", "msg")) or \
            (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "message")

    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Compare) and any(is_message(s) for s in [n.left, *n.comparators]):
            found.append(f"line {n.lineno}: {ast.unparse(n)}")
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                n.func.attr in ("startswith", "endswith", "find", "index", "count") and is_message(n.func.value):
            found.append(f"line {n.lineno}: {ast.unparse(n)}")
    return found


def test_no_decision_reads_a_message():
    """Outcomes are data (`Solution.stop`, `Status`): no module decides by reading message text."""
    offenders = []
    for name, path in modules().items():
        offenders += [f"{name} {hit}" for hit in message_decisions(path.read_text())]
    assert not offenders, "\n".join(offenders)
    assert message_decisions('if TIME_LIMITED in sol.message: pass')
    assert message_decisions('if message.endswith(STALLED): pass')
    assert message_decisions('ok = r["message"] == ""')


LOWER = ("gbcli.models", "gbcli.programs", "gbcli.data", "gbcli.reports")
HIGHER = ("gbcli.registry", "gbcli.experiments", "gbcli.training", "gbcli.runs")


def test_no_lower_layer_imports_a_higher_one():
    """models, programs, data and reports do not import the registry, experiments, training or runs
    (imports inside functions included)."""
    mods = modules()
    known = set(mods)
    offenders = {}
    for name, path in mods.items():
        if any(name == low or name.startswith(low + ".") for low in LOWER):
            bad = sorted(i for i in imports_of(name, path, known)
                         if any(i == high or i.startswith(high + ".") for high in HIGHER))
            if bad:
                offenders[name] = bad
    assert not offenders, offenders
