"""Model kinds, one module each (`gln`, `shallow`, `relu`, `frelu`, `linear`, `leaky`, `diagonal`,
`conv`, `deep_linear`, `gln3`, `convnet`, `residual`), on the shared interface of `base`
(parameters, spec, programs) and the hyperplane gating of `gating`. A kind's module imports
without torch; its torch modules are in `networks.<kind>`. The registry of kinds is
`gbcli.registry`."""

from gbcli.lazy import attach

__getattr__, __dir__ = attach(globals())   # each submodule on first use (PEP 562)
