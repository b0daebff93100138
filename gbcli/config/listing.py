"""The config reference (`gb config keys`): every section's and every model / dataset kind's keys
with their type, range, default and description, read from the live schema (`gbcli.config.schema`,
which imports without torch)."""

from __future__ import annotations

import difflib
import functools
import inspect
import json
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic_core import to_jsonable_python

from gbcli.config.loading import MAX_HINT_KEY
from gbcli.errors import GbError
from gbcli.schema import Section
from gbcli.text import quoted


# ------------------------------------------------------------------ the sections, from the schema


@functools.lru_cache(maxsize=1)
def sections() -> dict[str, dict]:
    """Section name ("" for the top level, "training", "model", "model.gln", ...) -> {"description", "keys": {key:
    {"type", "default" (absent when required), "range", "description"}}}; for a union section (model, dataset)
    {"description", "union": the key naming the kind, "default": the default kind, "kinds"}."""
    from gbcli.config.schema import UNIONS, Config, section_of
    from gbcli.registry import MODELS

    secs: dict[str, dict] = {"": {"description": _doc(Config), "keys": _keys(Config, tuple(UNIONS))}}
    for key, field in Config.model_fields.items():
        if key in UNIONS:
            kinds = UNIONS[key]
            secs[key] = {"description": field.description or "", "union": kinds.key, "default": kinds.default,
                         "kinds": list(kinds.classes)}
            for kind, cls in kinds.classes.items():
                about = MODELS[kind].description if key == "model" else _doc(cls)
                secs[f"{key}.{kind}"] = {"description": about, "keys": _keys(cls)}
        elif (cls := section_of(key)) is not None:
            secs[key] = {"description": _doc(cls) or field.description or "", "keys": _keys(cls)}
    return secs


# ------------------------------------------------------------------ types as text

# A key's type is written as a small expression: int (strict: no bool, float or string), float (strict: an int or
# a float), strict_bool (true or false only), str, null, any, 'a' (a literal), list[T], tuple[T, U], dict[K, V], A | B.
SCALARS = {int: ("int", "int (coerced)"), bool: ("strict_bool", "bool"), float: ("float", "float (coerced)"),
           str: ("strict str", "str"), type(None): ("null", "null"), Any: ("any", "any")}   # (strict, not strict)


def type_text(annotation: Any, metadata: tuple | list = ()) -> str:
    """The type of a pydantic field (its annotation and metadata) as the reference writes it."""
    strict = any(getattr(m, "strict", None) for m in metadata)
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation in SCALARS:
        return SCALARS[annotation][0 if strict else 1]
    if isinstance(annotation, type) and issubclass(annotation, Section):   # a nested mapping (training.adaptive_step)
        return "mapping"
    if origin is Annotated:
        return type_text(args[0], (*metadata, *args[1:]))
    if origin is Literal:
        return " | ".join(repr(a) if isinstance(a, str) else json.dumps(a) for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join(type_text(a, metadata) for a in args)
    if origin is list and len(args) == 1:
        return f"list[{type_text(args[0])}]"
    if origin is tuple and args and Ellipsis not in args:
        return f"tuple[{', '.join(type_text(a) for a in args)}]"
    if origin is dict and len(args) == 2:
        return f"dict[{type_text(args[0])}, {type_text(args[1])}]"
    return str(annotation).replace("typing.", "")


def _doc(obj: Any) -> str:
    """The first paragraph of an object's own docstring, as one line."""
    doc = inspect.cleandoc(obj.__doc__ or "") if obj.__dict__.get("__doc__") else ""
    return " ".join(doc.split("\n\n")[0].split())


def _range(metadata) -> str:
    """The bounds of a number as text: `>= 1`, `in [0, 1)`; "" when unbounded."""
    bound = {}   # "low" / "high" -> (bracket, the bound as text, the operator alone)
    for m in metadata:
        for attr, side, bracket, op in (("ge", "low", "[", ">="), ("gt", "low", "(", ">"), ("le", "high", "]", "<="),
                                        ("lt", "high", ")", "<")):
            v = getattr(m, attr, None)
            if v is not None:   # 2^63 rather than 9223372036854775808
                power = isinstance(v, int) and v >= 2 ** 20 and v & (v - 1) == 0
                bound[side] = (bracket, f"2^{v.bit_length() - 1}" if power else str(v), op)
    if len(bound) == 2:
        return f"in {bound['low'][0]}{bound['low'][1]}, {bound['high'][1]}{bound['high'][0]}"
    return next((f"{op} {v}" for _, v, op in bound.values()), "")


def _keys(cls, unions: tuple[str, ...] = ()) -> dict[str, dict]:
    """The entries of a section class's keys (`unions`: its keys that are sections of several kinds)."""
    out = {}
    for key, field in cls.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, Section) or key in unions:
            out[key] = {"type": "section", "description": field.description or ""}
            continue
        spec: dict[str, Any] = {"type": type_text(ann, field.metadata), "range": _range(field.metadata)}
        if not field.is_required():
            spec["default"] = to_jsonable_python(field.get_default(call_default_factory=True))
        spec["description"] = field.description or ""
        out[key] = spec
    return out


# ------------------------------------------------------------------ listing keys (gb config keys)


def select(selector: str | None) -> tuple[list[str], str | None]:
    """What `gb config keys SELECTOR` lists, as (sections, key or None): everything (None), a section (`training`;
    `top`), a union section with its kinds (`model`), a kind (`model.gln`), or a key (`training.lr`; in a union
    section: in every kind that has it). A GbError otherwise."""
    secs = sections()
    names = list(secs)
    if selector is None:
        return names, None
    wanted = selector.strip().strip(".")
    if wanted in ("", "top", "top-level"):
        return [""], None

    def family(name: str) -> list[str]:   # a section, with its kinds when it is a section of several kinds
        return [name] + [n for n in names if n.startswith(f"{name}.")] if "union" in secs[name] else [name]

    if wanted in secs:
        return family(wanted), None
    head, _, key = wanted.rpartition(".")
    if head in secs:   # "" (the top level) is a section
        holders = [n for n in family(head) if key in secs[n].get("keys", {}) or key == secs[n].get("union")]
        if holders:
            return holders, key
    known = ["top", *(n for n in names if n)]
    known += [f"{n.split('.')[0] + '.' if n else ''}{k}" for n in names for k in secs[n].get("keys", {})]
    match = difflib.get_close_matches(wanted, known, n=1, cutoff=0.6) if len(wanted) <= MAX_HINT_KEY else []
    hint = f"; did you mean {match[0]}?" if match else ""
    tops = ", ".join(n for n in names if n and "." not in n)
    raise GbError(f"SECTION: {quoted(selector)} is neither a section (top, {tops}; a kind: model.gln, dataset.mnist, "
                  f"...) nor a key (training.lr){hint}")


def rows(selector: str | None = None) -> list[dict]:
    """One row per key of the selected sections (`select`): section, key (as written in a config: model.kind,
    not model.gln.kind), type, range, default, required, description; a union section's row is its tag key's."""
    names, only = select(selector)
    out = []
    for name in names:
        entry = sections()[name]
        prefix = name.split(".")[0] + "." if name else ""
        if "union" in entry:
            if only in (None, entry["union"]):
                out.append({"section": name, "key": f"{name}.{entry['union']}",
                            "type": " | ".join(repr(k) for k in entry["kinds"]), "range": "",
                            "default": entry["default"], "required": False,
                            "description": f"the {name} kind (default {entry['default']}); the section's other "
                                           f"keys are the kind's own"})
            continue
        for key, spec in entry["keys"].items():
            if only in (None, key):
                out.append({"section": name, "key": f"{prefix}{key}", "type": spec["type"],
                            "range": spec.get("range", ""), "default": spec.get("default"),
                            "required": "default" not in spec, "description": spec["description"]})
    return out


def default_text(row: dict) -> str:
    if row["type"] == "section":
        return ""
    default = row["default"]
    return "required" if row["required"] else default if isinstance(default, str) else json.dumps(default)


def type_with_range(row: dict) -> str:
    return f"{row['type']} {row['range']}".strip()


def blocks(selected: list[dict]) -> list[tuple[str, list[dict]]]:
    """The rows grouped by section, each group with its title; kinds with identical keys (mnist,
    fashion-mnist, digits) are one group."""
    by_section: dict[str, list[dict]] = {}
    for r in selected:
        by_section.setdefault(r["section"], []).append(r)
    groups: list[tuple[list[str], list[dict]]] = []
    for name, rs in by_section.items():
        same = [names for names, prev in groups if "." in name and names[0].split(".")[0] == name.split(".")[0]
                and [{**r, "section": ""} for r in prev] == [{**r, "section": ""} for r in rs]]
        if same:
            same[0].append(name)
        else:
            groups.append(([name], rs))
    out = []
    for names, rs in groups:   # `training: ...`, `top level: ...`, `model.gln (model.kind: gln): ...`
        title = names[0] or "top level"
        if "." in title:
            top = names[0].split(".")[0]
            kinds = ", ".join(n.split(".", 1)[1] for n in names)
            title = f"{', '.join(names)} ({top}.{sections()[top]['union']}: {kinds})"
        about = {sections()[n]["description"] for n in names}
        out.append((title + (f": {about.pop()}" if len(about) == 1 else ""), rs))
    return out


def render_text(selected: list[dict]) -> str:
    """Plain text: a [title] line before each section's keys, then one line per key (grep-friendly):
    key, type and range, default, description."""
    lines: list[str] = []
    for title, rs in blocks(selected):
        if lines:
            lines.append("")
        lines.append(f"[{title}]")
        cols = [(r["key"], type_with_range(r), default_text(r), r["description"]) for r in rs]
        width = [max(len(c[i]) for c in cols) for i in range(3)]
        for c in cols:
            lines.append("  ".join(c[i].ljust(width[i]) for i in range(3)) + "  " + c[3])
    return "\n".join(line.rstrip() for line in lines) + "\n"
