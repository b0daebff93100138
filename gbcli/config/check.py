"""The fast check of a config: its keys, kinds and plain value types judged against the key
snapshot (`gbcli.config.keys`) before torch, the registry or any model module is imported.

A typo (`training.momentun`), a value of the wrong type (`training.lr: abc`) or an unknown
model kind is reported at once, in the words of the full validation (the errors are pydantic's
own, formatted by the same function). What the snapshot cannot judge (ranges, cross-key rules,
the sections' and kinds' own validators, a section that is not a mapping, a missing required
key) is left to the full validation, which runs next; a config the fast check passes is not
thereby valid. A config with several errors may be told a different one of them first than the
full validation would tell: an error the fast check finds is reported even when a range or a
validator would have failed on an earlier key.
"""

from __future__ import annotations

import functools
from typing import Any, Literal, Optional, Union

from gbcli.config.keys import parse_type, sections, union_of


def first_errors(raw: dict) -> list[dict]:
    """The pydantic-style errors ({type, loc, msg, input, ctx}) of the first key found wrong, in the
    order the full validation reports them (a section's keys in their declared order, then its
    unknown keys), or [] when the snapshot finds nothing wrong."""
    if not isinstance(raw, dict):
        return []
    try:
        return _section(raw, "", ())
    except _Undecided:
        return []


class _Undecided(Exception):
    """A value the fast check cannot judge (a section that is not a mapping, a key that is not a
    string, a required key missing, a type it does not spell): whether the full validation reports
    it before a later error the fast check would find is unknown, so the full validation decides."""


def _section(value: dict, name: str, loc: tuple) -> list[dict]:
    if any(not isinstance(k, str) for k in value):   # pydantic's own message for such keys
        raise _Undecided
    keys = sections()[name]["keys"]
    if any(key not in value and "default" not in spec and spec["type"] != "section" for key, spec in keys.items()):
        # a required key is missing (model.weights, dataset.x): left to the full validation, whose first
        # error may come from a section before this one (a check the snapshot cannot make), and which
        # names the missing key rather than a misspelt one after it
        raise _Undecided
    for key, spec in keys.items():
        if key not in value:
            continue
        errors = _value(value[key], key, spec, loc) if name == "" else _typed(value[key], spec["type"], (*loc, key))
        if errors:
            return errors
    for key in value:
        if key not in keys:
            return [{"type": "extra_forbidden", "loc": (*loc, key), "msg": "Extra inputs are not permitted",
                     "input": value[key]}]
    return []


def _value(v: Any, key: str, spec: dict, loc: tuple) -> list[dict]:
    """A top-level key: a section (judged key by key), a union section (its kind first), or a value."""
    if spec["type"] != "section":
        return _typed(v, spec["type"], (*loc, key))
    if not isinstance(v, dict):   # not a mapping: the full validation words it
        raise _Undecided
    u = union_of(key)
    if u is None:
        return _section(v, key, (*loc, key))
    tag = v.get(u["union"], u["default"])
    if not isinstance(tag, str):
        raise _Undecided
    if tag not in u["kinds"]:
        expected = ", ".join(repr(k) for k in u["kinds"])
        return [{"type": "union_tag_invalid", "loc": (*loc, key), "input": v,
                 "msg": f"Input tag {tag!r} found using tag() does not match any of the expected tags: {expected}",
                 "ctx": {"discriminator": "tag()", "tag": tag, "expected_tags": expected}}]
    return _section(v, f"{key}.{tag}", (*loc, key, tag))


def _typed(v: Any, text: str, loc: tuple) -> list[dict]:
    """The errors pydantic gives for value `v` of a key of type `text` (types only: no ranges)."""
    try:
        tree = parse_type(text)
    except ValueError:   # a type the snapshot does not spell: the full validation judges it
        raise _Undecided from None
    if _plainly(v, tree):
        return []
    from pydantic import ValidationError

    try:
        _adapter(text).validate_python(v)
    except ValidationError as exc:
        return [{**e, "loc": (*loc, *e["loc"])} for e in exc.errors()]
    return []


def _plainly(v: Any, t: tuple) -> bool:
    """`v` is certainly of type `t` (without coercion); False: ask pydantic."""
    kind = t[0]
    if kind == "int":
        return type(v) is int
    if kind == "float":
        return type(v) in (int, float)
    if kind in ("bool", "strict_bool"):
        return type(v) is bool
    if kind == "str":
        return type(v) is str
    if kind == "null":
        return v is None
    if kind == "any":
        return True
    if kind == "lit":
        return type(v) is type(t[1]) and v == t[1]
    if kind == "list":
        return type(v) is list and all(_plainly(x, t[1]) for x in v)
    if kind == "tuple":
        return type(v) in (list, tuple) and len(v) == len(t[1]) and all(_plainly(x, m) for x, m in zip(v, t[1]))
    if kind == "dict":
        return type(v) is dict and all(_plainly(k, t[1]) and _plainly(x, t[2]) for k, x in v.items())
    if kind == "union":
        return any(_plainly(v, m) for m in t[1])
    return False


@functools.lru_cache(maxsize=None)
def _adapter(text: str):
    from pydantic import TypeAdapter

    return TypeAdapter(_annotation(parse_type(text)))


def _annotation(t: tuple):
    """The Python type of a type tree, as pydantic validates the live field (ranges aside)."""
    from pydantic import StrictBool, StrictInt

    kind = t[0]
    simple = {"int": StrictInt, "float": float, "bool": bool, "strict_bool": StrictBool, "str": str,
              "null": type(None), "any": Any}
    if kind in simple:
        return simple[kind]
    if kind == "lit":
        return Literal[t[1]]
    if kind == "list":
        return list[_annotation(t[1])]
    if kind == "tuple":
        return tuple[tuple(_annotation(m) for m in t[1])]
    if kind == "dict":
        return dict[_annotation(t[1]), _annotation(t[2])]
    # a union: a run of literals is one Literal (Literal['a', 'b'] is one member, not two)
    members: list = []
    literals: list | None = None
    for m in t[1]:
        if m[0] == "lit":
            if literals is None:
                literals = []
                members.append(literals)
            literals.append(m[1])
        else:
            literals = None
            members.append(_annotation(m))
    members = [Literal[tuple(m)] if isinstance(m, list) else m for m in members]
    if len(members) == 1:
        return members[0]
    nullable = type(None) in members
    rest = [m for m in members if m is not type(None)]
    core = rest[0] if len(rest) == 1 else Union[tuple(rest)]
    return Optional[core] if nullable else core
