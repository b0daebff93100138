"""The one owner of run and sweep directories: their layout (`layout`), the safe file layer
(`safe`), records (`records`), identity (`identity`), the solve cache (`cache`), locks (`lock`),
labels (`labels`), integrity checks (`integrity`) and saved solutions (`solutions`)."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
