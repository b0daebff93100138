"""The floor of the house, usable by every package: the safe file layer (`safe`: bounded untrusted
reads, atomic writes, appends and removals that never follow a link; the one place that checks
links) and the names of run and sweep folders and files (`layout`). It imports no other gbcli
package but `gbcli.errors`."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
