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
