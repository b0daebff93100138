"""Run configuration: the schema (`schema`: sections, the model and dataset unions), reading
(`loading`: YAML, presets, `--set` overrides, one-line errors, run directories), the key snapshot
(`keys`: every key's type, default and description, read without importing the models) and the
fast check against it (`check`).

The names below are resolved on first use (PEP 562): the schema imports torch and every model
module, and reading a config or reporting a typo in it must not wait for them."""

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
