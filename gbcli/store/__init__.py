"""The one owner of run and sweep directories' records, over the file layer (`gbcli.fs`): records,
views, identity, the solve cache, locks, labels, integrity checks and saved solutions."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
