"""Reports of finished runs and sweeps: tables (`tables`), figures (`figures`), PNG output (`render`)."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
