"""The one owner of run and sweep directories' records, over the file layer (`gbcli.fs`: the safe
file layer and the layout's names): records (`records`), identity (`identity`), the solve cache
(`cache`), locks (`lock`), labels (`labels`), integrity checks (`integrity`) and saved solutions
(`solutions`)."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
