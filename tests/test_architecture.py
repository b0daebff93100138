"""The package's structure: packages import only the layers below them and no module cycle
(imports inside functions included), experiments build on models and never the reverse, no module
outside a model kind's own module (and the registry) branches on that kind, record names and
path shapes only in the store and the layout, link checks only in the file layer, no decision on
message text. Each check runs on a copy of the package with a violation written into it."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

from gbcli.registry import MODELS

PACKAGE = Path(__file__).resolve().parents[1] / "gbcli"


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
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
RECORD_FOLDERS = ("gd", "svm", "points", "tables", "figures", "solves", "solutions", "slurm")   # in a path shape
LINK_CHECKS = ("islink", "is_symlink", "O_NOFOLLOW", "lstat", "lexists", "follow_symlinks", "is_link")
# Where a record's name may be spelled: the store and the layout's names in the file layer.
NAMES_OWNERS = ("gbcli.store", "gbcli.fs.layout")
# Path shapes of records spelled outside the store when the check learned them (issue 48: the views
# are to replace them): module -> how many. The list may only shrink; a new one fails the test.
KNOWN_PATH_SHAPES = {}
# Link decisions outside the file layer that were there when the check learned `is_link` (issue
# 48): module -> how many. The list may only shrink; a new one fails the test.
KNOWN_LINK_DECISIONS = {"gbcli.store.solutions": 1,
                        "gbcli.runs.stages": 1}
# sbatch's refusal is named from its words (the key at fault); the one message read left (issue 48)
KNOWN_MESSAGE_READS: dict[str, int] = {}


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
    """A record's name, alone or in a path (`"points/*/gd/metrics.csv"`), or a path shape of the run
    directory's folders (`"points/*/gd"`, not a sentence that names one), in code (not docstrings)."""
    found = []
    for ln, v in _code_constants(ast.parse(source)):
        parts = re.split(r"[/\\]", v)
        if any(p in RECORD_NAMES for p in parts) or \
                (len(parts) > 1 and not re.search(r"\s", v) and any(p in RECORD_FOLDERS for p in parts)):
            found.append(f"line {ln}: {v!r}")
    return found


def link_checks(source: str) -> list[str]:
    found = []
    for n in ast.walk(ast.parse(source)):
        name = n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else \
            n.arg if isinstance(n, ast.keyword) else None
        if name in LINK_CHECKS:
            found.append(f"line {n.lineno}: {name}")
    return found


def record_name_offenders(root: Path = PACKAGE) -> list[str]:
    offenders = []
    for name, path in modules(root).items():
        if not any(name == o or name.startswith(o + ".") for o in NAMES_OWNERS):
            hits = record_name_literals(path.read_text())
            if len(hits) > KNOWN_PATH_SHAPES.get(name, 0):
                offenders += [f"{name} {hit}" for hit in hits]
    return offenders


def test_record_file_names_are_spelled_only_in_the_store():
    assert not record_name_offenders(), "\n".join(record_name_offenders())
    known = {name: n for name, path in modules().items() if not any(name == o or name.startswith(o + ".") for o in
             NAMES_OWNERS) and (n := len(record_name_literals(path.read_text())))}
    assert known == KNOWN_PATH_SHAPES   # one gone: lower its number in KNOWN_PATH_SHAPES
    assert record_name_literals('p = run / "gd" / "summary.json"')          # the check sees one
    assert record_name_literals('run.glob("points/*/gd/metrics.csv")')      # in a path
    assert record_name_literals('run.glob(f"points/{p}/gd")')                # a path shape
    assert not record_name_literals('"""Reads gd/summary.json."""\nx = 1')  # docstrings may name them


def link_offenders(root: Path = PACKAGE) -> list[str]:
    """Link checks and decisions (`if is_link(p)`) outside the file layer, beyond the known ones."""
    offenders = []
    for name, path in modules(root).items():
        if name == "gbcli.fs.safe":
            continue
        hits = [hit for hit in link_checks(path.read_text()) if not hit.endswith(": is_link")]
        decisions = [hit for hit in link_checks(path.read_text()) if hit.endswith(": is_link")]
        if len(decisions) > KNOWN_LINK_DECISIONS.get(name, 0):
            hits += decisions
        offenders += [f"{name} {hit}" for hit in hits]
    return offenders


def test_links_are_checked_only_in_the_safe_file_layer():
    assert not link_offenders(), "\n".join(link_offenders())
    known = {name: n for name, path in modules().items() if name != "gbcli.fs.safe"
             and (n := sum(h.endswith(": is_link") for h in link_checks(path.read_text())))}
    assert known == KNOWN_LINK_DECISIONS   # one gone: lower its number in KNOWN_LINK_DECISIONS
    assert link_checks("import os\nos.path.islink(p)") and link_checks("p.is_symlink()")
    assert link_checks("os.open(p, os.O_RDONLY | os.O_NOFOLLOW)")
    assert link_checks("if is_link(p): pass") and link_checks("if safe.is_link(p): pass")


def message_decisions(source: str) -> list[str]:
    """Comparisons that read a message: `X in <...message...>`, `<...message...>.startswith/endswith(...)`,
    `<...message...> == X`, where the message is a name or attribute called message/msg, or a process's
    stderr/stdout."""
    def is_message(node) -> bool:
        return (isinstance(node, ast.Name) and node.id in ("message", "msg")) or \
            (isinstance(node, ast.Attribute) and node.attr in ("message", "msg", "stderr", "stdout")) or \
            (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "message") or \
            (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("str", "repr")
             and len(node.args) == 1 and isinstance(node.args[0], ast.Name) and node.args[0].id in caught) or \
            (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and
             node.func.attr in ("lower", "upper", "casefold") and is_message(node.func.value))

    tree = ast.parse(source)
    caught = {h.name for h in ast.walk(tree) if isinstance(h, ast.ExceptHandler) and h.name}   # str(exc): its message
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                n.func.attr in ("lower", "upper", "casefold") and is_message(n.func.value):
            found.append(f"line {n.lineno}: {ast.unparse(n)}")   # a message read without case: read to decide
        elif isinstance(n, ast.Compare) and any(is_message(s) for s in [n.left, *n.comparators]):
            found.append(f"line {n.lineno}: {ast.unparse(n)}")
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                n.func.attr in ("startswith", "endswith", "find", "index", "count") and is_message(n.func.value):
            found.append(f"line {n.lineno}: {ast.unparse(n)}")
    return found


def message_offenders(root: Path = PACKAGE) -> list[str]:
    offenders = []
    for name, path in modules(root).items():
        hits = message_decisions(path.read_text())
        if len(hits) > KNOWN_MESSAGE_READS.get(name, 0):
            offenders += [f"{name} {hit}" for hit in hits]
    return offenders


def test_no_decision_reads_a_message():
    """Outcomes are data (`Solution.stop`, `Status`, an exception's type): no module decides by
    reading message text."""
    assert not message_offenders(), "\n".join(message_offenders())
    known = {name: n for name, path in modules().items() if (n := len(message_decisions(path.read_text())))}
    assert known == KNOWN_MESSAGE_READS   # one gone: lower its number in KNOWN_MESSAGE_READS
    assert message_decisions('try:\n    f()\nexcept OSError as exc:\n    if "weights_only" in str(exc): pass')
    assert not message_decisions('if str(p) != ".": pass')   # a path's text is not a message
    assert message_decisions('low = msg.lower()')
    assert message_decisions('if "Invalid job id" not in proc.stderr: pass')   # a command's words
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


# ------------------------------------------------------------------ layers, one way down

# Bottom to top: a package imports only packages of a lower line, imports inside functions
# included (a package is gbcli's first-level name: gbcli/cli.py is `cli`). The order also rules out
# a cycle between packages.
LAYERS = (
    "errors lazy text schema",                # no gbcli import
    "fs metrics provenance interrupts",       # the floor: safe file I/O and layout names; metrics
    "data programs logs reports optimizers",  # datasets; designs, norms, solvers, outcomes; messages; tables;
                                              # update rules and their geometries
    "models instruments",                     # model kinds; trackers
    "registry",                               # the one list of model kinds and instruments
    "config",                                 # the schema
    "store",                                  # records, identity, cache, solutions, lock
    "training",                               # the loop and optimizers
    "experiments",                            # the papers' plugins (entry points, not imported below)
    "runs",                                   # stages, sweeps, executors, verify, figures
    "cli",
)
LAYER = {package: i for i, line in enumerate(LAYERS) for package in line.split()}


def package_imports(root: Path = PACKAGE) -> list[tuple[str, str, str]]:
    """(importer, imported, "file:line") for every import of one package of `root` by another, at
    module level or inside a function (every Import and ImportFrom node, relative ones resolved)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts == ("__init__",):
            continue
        package = [root.name, *parts[:-1]]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in node.names] if base == root.name else [base]
            else:
                continue
            for name in names:
                bits = name.split(".")
                if len(bits) > 1 and bits[0] == root.name and bits[1] != parts[0] and \
                        ((root / bits[1]).is_dir() or (root / f"{bits[1]}.py").is_file()):
                    out.append((parts[0], bits[1], f"{path.relative_to(root.parent)}:{node.lineno}"))
    return out


def layer_violations(root: Path = PACKAGE) -> list[str]:
    found = []
    for here, there, where in package_imports(root):
        if here not in LAYER or there not in LAYER:
            found.append(f"{where}: {here} -> {there}: {here if here not in LAYER else there} has no line in LAYERS")
        elif LAYER[there] >= LAYER[here]:
            found.append(f"{where}: {here} -> {there} ({'its own' if LAYER[there] == LAYER[here] else 'a higher'} line)")
    return found


def test_packages_import_only_the_layers_below():
    assert len(package_imports()) > 100                   # the walk sees the imports
    assert not layer_violations(), "\n".join(layer_violations())
    graph: dict[str, set[str]] = {}
    for here, there, _ in package_imports():
        graph.setdefault(here, set()).add(there)
    assert find_cycle(graph) is None                      # which the order implies: no circle of packages


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / PACKAGE.name
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


@pytest.mark.parametrize("where, source, found", [
    ("fs/probe.py", "def f():\n    from gbcli.store import records\n", "fs -> store"),         # inside a function
    ("data/probe.py", "from ..runs import sweep\n", "data -> runs"),                          # relative
    ("programs/probe.py", "import gbcli.models.gating\n", "programs -> models"),
    ("registry.py", "def f():\n    from gbcli import experiments\n", "registry -> experiments"),
    ("config/probe.py", "from gbcli.registry import MODELS\nfrom gbcli.store import lock\n", "config -> store"),
    ("store/probe.py", "from gbcli.store import lock\nfrom gbcli.training import loop\n", "store -> training"),
    ("models/probe.py", "from gbcli.instruments import base\n", "models -> instruments"),   # its own line
    ("plugin/probe.py", "from gbcli.fs import safe\n", "plugin has no line"),             # a package not placed
])
def test_a_planted_upward_import_fails_the_layer_check(tmp_path, where, source, found):
    root = _copy(tmp_path)
    assert not layer_violations(root)
    (root / where).parent.mkdir(exist_ok=True)
    with (root / where).open("a") as fh:
        fh.write("\n" + source)
    hits = layer_violations(root)
    assert len(hits) == 1 and found in hits[0] and where in hits[0], hits


@pytest.mark.parametrize("check, source", [
    (record_name_offenders, "def points(run):\n    return sorted(run.glob('points/*/gd/metrics.csv'))\n"),
    (message_offenders, "def load(f):\n    try:\n        return f()\n    except Exception as exc:\n"
                        "        return 'weights_only' in str(exc)\n"),
    (link_offenders, "from gbcli.fs.safe import is_link\n\n\ndef skip(p):\n    if is_link(p):\n        return True\n"),
])
def test_the_issues_planted_violations_fail_the_architecture_checks(tmp_path, check, source):
    """Issue 48: a `points/*/gd/metrics.csv` glob outside the store, a decision on
    `"weights_only" in str(exc)` and an `if is_link(p)` decision outside the file layer, each
    written into a copy of the package (into a module that may have known ones: runs/verify)."""
    root = _copy(tmp_path)
    assert not check(root)
    for target in (root / "runs" / "planted.py", root / "runs" / "verify.py"):
        with target.open("a") as fh:
            fh.write("\n\n" + source)
        assert any(target.stem in hit for hit in check(root)), check(root)
