"""Reading configs: YAML files, presets, `--set` overrides, validation into a `Config` with
one-line errors naming the key (and what a misspelt key may have meant), and the run directory
of a config."""

from __future__ import annotations

import copy
import difflib
import os
import re
import stat
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin

import yaml

from gbcli.errors import GbError
from gbcli.text import quoted, shorten

if TYPE_CHECKING:   # the schema: imported where a config is validated, not by every reader of YAML
    from gbcli.config.schema import Config

PRESET_DIR = Path(__file__).parent / "presets"
MAX_HINT_KEY = 64   # an unknown key longer than this gets no did-you-mean (difflib is quadratic)


def deep_merge(base: dict, over: dict) -> dict:
    """Recursively merge `over` into a copy of `base` (dicts merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    """`training.lr=0.01` -> (['training', 'lr'], 0.01); the value is read as YAML."""
    if "=" not in text:
        raise GbError(f"--set {shorten(text)}: expected key.path=value")
    key, value = text.split("=", 1)
    path = key.strip().split(".")
    if not all(path):
        raise GbError(f"--set {shorten(text)}: empty key")
    try:
        parsed = load_yaml_text(value) if value.strip() else None
    except yaml.constructor.ConstructorError as exc:
        raise GbError(f"--set {shorten(text)}: {shorten(str(exc.problem))}") from None
    except (yaml.YAMLError, RecursionError):
        parsed = value
    return path, parsed


def set_path(d: dict, path: list[str], value: Any) -> dict:
    """Return a copy of `d` with the nested key `path` set to `value`."""
    out = copy.deepcopy(d)
    node = out
    for p in path[:-1]:
        if not isinstance(node.get(p, {}), dict):
            raise GbError(f"--set {shorten('.'.join(path))}: {shorten(p)} is not a section")
        node = node.setdefault(p, {})
    node[path[-1]] = value
    return out


MAX_DEPTH = 32          # nesting levels a config may have (ours has 4)
MAX_INT_DIGITS = 40     # digits of an integer value (seeds are below 2**63: 19 digits)
MAX_CONFIG_BYTES = 10_000_000


class StrictLoader(yaml.SafeLoader):
    """YAML for configs: a duplicated key, an alias, deep nesting or an oversized integer is an
    error (PyYAML silently keeps the last duplicate, and would happily build a billion-laughs
    alias bomb or a 5000-digit integer)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.constructor.ConstructorError(None, None, "YAML aliases (*name) are not supported in configs",
                                                    mark)
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.constructor.ConstructorError(None, None, f"nested more than {MAX_DEPTH} levels deep",
                                                        self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (list, dict)):
                raise yaml.constructor.ConstructorError(None, None, "a key must be a plain value", key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {quoted(key)}",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node):
        digits = sum(ch.isdigit() for ch in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise yaml.constructor.ConstructorError(None, None, f"integer with {digits} digits is too large",
                                                    node.start_mark)
        return super().construct_yaml_int(node)


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
# YAML 1.1 reads 1e-3 (an exponent without a dot) as text; YAML 1.2, and everyone who writes a learning
# rate, read it as a number. Numbers are numbers here: the float keys take no text ("0.1") and no bool.
StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"),
                                   list("-+0123456789"))


def load_yaml_text(text: str):
    """Parse config text with StrictLoader (raises yaml.YAMLError)."""
    loader = StrictLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def read_yaml(path: str | Path) -> dict:
    """The mapping in a YAML config file (`_read_config_text`)."""
    path = Path(path)
    try:
        raw = load_yaml_text(_read_config_text(path))
    except RecursionError:
        raise GbError(f"{path}: not valid YAML: nested too deeply") from None
    except UnicodeDecodeError:
        raise GbError(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise GbError(f"{path}: cannot read the config ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]  # ReaderError: no .problem
        raise GbError(f"{path}: not valid YAML{where}: {shorten(str(problem))}") from None
    if raw is None:   # no YAML document (0 bytes, comments, whitespace): not a config of defaults by accident
        raise GbError(f"{path}: is empty (no YAML document; a config is a mapping of sections, "
                      f"`{{}}` for every default)")
    if not isinstance(raw, dict):
        raise GbError(f"{path}: a config must be a mapping of sections, got {type(raw).__name__}")
    return raw


def _read_config_text(path: Path) -> str:
    """The text of a config file: a regular file of at most MAX_CONFIG_BYTES (a FIFO or a device such as /dev/zero
    is refused, not waited on or read forever), read once and checked on the open file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)   # read-only: a directory opens too
    except (FileNotFoundError, NotADirectoryError, ValueError):   # ValueError: a NUL in the path
        raise GbError(f"{path}: config file not found") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise GbError(f"{path}: is a directory, not a config file")
        if not stat.S_ISREG(st.st_mode):
            raise GbError(f"{path}: not a regular file (a config is read from a file, not a device or pipe)")
        if st.st_size > MAX_CONFIG_BYTES:
            raise GbError(f"{path}: {st.st_size} bytes is too large for a config (at most {MAX_CONFIG_BYTES})")
        os.set_blocking(fd, True)
        with open(fd, "rb", closefd=False) as f:
            data = f.read(MAX_CONFIG_BYTES + 1)   # a file that grows (or lies about its size) is still bounded
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise GbError(f"{path}: more than {MAX_CONFIG_BYTES} bytes is too large for a config")
    return data.decode("utf-8")


def read_stored_config(path: str | Path, strict: bool = False) -> dict | None:
    """The one reader of a stored (received) config.yaml: its raw mapping, read through the file layer (no link,
    at most MAX_CONFIG_BYTES, no aliases). None when missing, unreadable, not YAML or not a mapping; with `strict`
    that problem is raised instead (FileNotFoundError when missing, else OSError, ValueError, yaml.YAMLError)."""
    from gbcli.fs.safe import load_yaml, read_text_untrusted   # numpy: not on a config error's path

    try:
        raw = load_yaml(read_text_untrusted(path, MAX_CONFIG_BYTES))
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: not a mapping")
    except (OSError, ValueError, yaml.YAMLError, RecursionError):   # UnicodeDecodeError is a ValueError
        if strict:
            raise
        return None
    return raw


def apply_preset(raw: dict, source: str = "config") -> dict:
    """Merge the named preset (if any) under the user's values."""
    preset = raw.get("preset")
    if preset is None:
        return raw
    known = sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))
    if not isinstance(preset, str) or preset not in known:   # never a path: only our preset files
        raise GbError(f"{source}: preset: unknown preset {quoted(preset)} (known: {', '.join(known)})")
    return deep_merge(load_yaml_text((PRESET_DIR / f"{preset}.yaml").read_text()), raw)


def _validated(raw: dict, source: str) -> Config:
    from pydantic import ValidationError

    from gbcli.config.schema import UNIONS, Config
    from gbcli.data.sources import validation_message

    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        tags = {s: u.key for s, u in UNIONS.items()}
        raise GbError(f"{source}: {validation_message(exc.errors(), config_key, unknown_key_hint, tags)}") from None


def validate(raw: dict, source: str = "config") -> Config:
    """A raw dict (preset applied) as a resolved Config, or a one-line GbError: the derived values are filled
    in and validated again, so a dumped config validates to the same Config."""
    cfg = _validated(raw, source)
    updates = cfg.resolution()
    return _validated(deep_merge(raw, updates), source) if updates else cfg


def config_key(loc: tuple | list) -> str:
    """The dotted config key of a pydantic error location, without the kind of a union section
    (`('model', 'gln', 'leaky_alpha')` -> model.leaky_alpha) or a union member (`training.epochs.int`); shortened."""
    from gbcli.config.schema import UNIONS, Config, section_of

    parts: list[str] = []
    section: type | None = Config   # the section the next part is a key of (None: below a value)
    kinds = None                    # the next part is the kind of this union section
    skip = False                    # the next part is a union member's tag
    for p in loc:
        if kinds is not None:
            section, kinds = kinds.classes.get(p), None
            continue
        if skip:
            skip = False
            continue
        parts.append(shorten(str(p), 120))
        field = section.model_fields.get(p) if section is not None and isinstance(p, str) else None
        top, section = section, None
        if field is None:
            continue
        if top is Config and p in UNIONS:
            kinds = UNIONS[p]
        elif top is Config and section_of(p) is not None:
            section = section_of(p)
        elif get_origin(field.annotation) in (Union, types.UnionType):
            # pydantic names the failing member in the location (training.epochs.int) of a union of two or more
            # members besides null, a run of literals counting as one
            literal = [get_origin(a) is Literal for a in get_args(field.annotation) if a is not type(None)]
            skip = sum(1 for i, lit in enumerate(literal) if not (lit and i and literal[i - 1])) > 1
    return shorten(".".join(parts), 240)


def unknown_key_hint(loc: tuple | list) -> str:
    """What an unknown key at `loc` may have meant: ` (did you mean training.momentum?)`, or
    ` (a key of model.kind leaky, not gln)` for a key of another kind; "" when nothing fits."""
    from gbcli.config.schema import UNIONS, Config, section_of

    if not loc or not isinstance(loc[-1], str) or len(loc[-1]) > MAX_HINT_KEY:
        return ""
    key, where = loc[-1], [str(p) for p in loc[:-1]]
    if not where:
        section, prefix = Config, ""
    elif len(where) == 1 and section_of(where[0]) is not None:
        section, prefix = section_of(where[0]), f"{where[0]}."
    elif len(where) == 2 and where[0] in UNIONS and where[1] in UNIONS[where[0]].classes:
        kinds = UNIONS[where[0]]
        others = [k for k, cls in kinds.classes.items() if k != where[1] and key in cls.model_fields]
        if others:
            return f" (a key of {where[0]}.{kinds.key} {', '.join(others)}, not {where[1]})"
        section, prefix = kinds.classes[where[1]], f"{where[0]}."
    else:
        return ""
    match = difflib.get_close_matches(key, list(section.model_fields), n=1, cutoff=0.7)
    return f" (did you mean {prefix}{match[0]}?)" if match else ""


def read_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """The raw config dict of a file with `--set` overrides applied (named after the file by default)."""
    raw = read_yaml(path)
    raw.setdefault("name", re.sub(r"[^A-Za-z0-9._+-]", "-", Path(path).stem).lstrip("._+-")[:128] or "run")
    for text in overrides:
        key, value = parse_override(text)
        raw = set_path(raw, key, value)
    return raw


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read, override, preset-merge and validate a config file (the schema imports without torch:
    a typo is reported at once)."""
    return validate(apply_preset(read_config(path, overrides), str(path)), str(path))


def override_tag(overrides: list[str] | tuple[str, ...]) -> str | None:
    """A short hash of the `--set` overrides that change what is trained (the last value of a key counts; not svm
    keys, as the run directory holds every program, nor execution keys), or None when there are none: the default
    run directory of `--set model.hidden_units=50` is runs/<name>-<tag>, not the plain run's."""
    import hashlib
    import json

    from gbcli.config.schema import execution_keys

    how, values = execution_keys("execution"), {}
    for text in overrides:
        path, value = parse_override(text)
        if path[0] != "svm" and not any(".".join(path[:i]) in how for i in range(1, len(path) + 1)):
            values[".".join(path)] = value
    if not values:
        return None
    blob = json.dumps(sorted(values.items()), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


def run_dir_for(cfg: Config, out: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Path:
    """The run directory: --out, else output.dir, else runs/<name>, or runs/<name>-<tag> when `--set` overrides
    change what is trained (`override_tag`), so a run with overrides never replaces the plain run's results."""
    if out is not None:
        if not str(out).strip():
            raise GbError("--out: an empty path (give a directory, e.g. runs/x)")
        path, key = Path(out), "--out"
    elif cfg.output.dir is not None:
        if not cfg.output.dir.strip():
            raise GbError("output.dir: an empty path (give a directory, or leave the key out)")
        path, key = Path(cfg.output.dir), "output.dir"
    else:
        tag = override_tag(overrides)
        path, key = Path("runs") / (cfg.name if tag is None else f"{cfg.name}-{tag}"), "name"
    try:   # a name too long for the file system (ENAMETOOLONG) is bad input too
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        if blocker is not None:  # refuse now rather than fail at the first write, after the work
            raise GbError(f"{key}: {shorten(str(blocker))} exists and is not a directory")
        existing = next(p for p in (path, *path.parents) if p.exists() or p == Path(p.anchor or "."))
        writable = os.access(existing if existing.exists() else Path("."), os.W_OK | os.X_OK)
    except OSError as exc:
        raise GbError(f"{key}: {shorten(str(path))}: {exc.strerror or exc}") from None
    from gbcli.fs.safe import read_only_fs   # numpy: not on a config error's path

    if not writable or read_only_fs(existing):
        raise GbError(f"{key}: {shorten(str(path))}: cannot write here ({shorten(str(existing))} is not writable)")
    return path


def dump_config(cfg: Config) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
