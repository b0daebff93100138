"""Model kinds, one module each (`gln`, `shallow`, `relu`, `frelu`, `linear`, `leaky`, `diagonal`,
`conv`), on the shared interface of `base` (parameters, spec, programs) and the hyperplane gating
of `gating`. The registry of kinds is `gbcli.registry`."""
