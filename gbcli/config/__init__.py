"""Run configuration: the schema (`schema`: sections, the model and dataset unions) and reading
(`loading`: YAML, presets, `--set` overrides, one-line errors, run directories)."""

from gbcli.config.loading import (apply_preset, deep_merge, dump_config, format_validation_error, load_config,
                                  parse_override, read_config, read_yaml, run_dir_for, set_path, validate)
from gbcli.config.schema import Config

__all__ = ["Config", "apply_preset", "deep_merge", "dump_config", "format_validation_error", "load_config",
           "parse_override", "read_config", "read_yaml", "run_dir_for", "set_path", "validate"]
