"""Run configuration: the schema (`schema`: sections, the model and dataset unions, the only
validator of a config; it imports without torch), reading (`loading`: YAML, presets, `--set`
overrides, one-line errors, run directories) and the reference of every key (`listing`: its type,
default and description, for `gb config keys`).

The names below are resolved on first use (PEP 562): reading a YAML file needs neither pydantic's
models nor the model kinds."""

import importlib

_NAMES = {
    "Config": "gbcli.config.schema",
    **{name: "gbcli.config.loading" for name in (
        "apply_preset", "deep_merge", "dump_config", "format_validation_error", "load_config", "parse_override",
        "read_config", "read_yaml", "run_dir_for", "set_path", "validate")},
}
__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gbcli.config' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_NAMES))
