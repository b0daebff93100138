"""Run configuration: the schema (`schema`, the only validator), reading (`loading`: YAML, presets, `--set`,
one-line errors, run directories) and the key reference (`listing`, for `gb config keys`). Names resolve on first
use (PEP 562): reading YAML needs neither pydantic's models nor the model kinds."""

from gbcli.lazy import attach

_NAMES = {
    "Config": "gbcli.config.schema",
    **{name: "gbcli.config.loading" for name in (
        "apply_preset", "deep_merge", "dump_config", "load_config", "parse_override",
        "read_config", "read_stored_config", "read_yaml", "run_dir_for", "set_path", "validate")},
}
__all__ = sorted(_NAMES)

__getattr__, __dir__ = attach(globals(), _NAMES)
