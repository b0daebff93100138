"""gb: a laboratory for the implicit bias of gradient descent.

The library API (usable from a notebook) lives in the submodules: `config`, `data`,
`contexts`, `models`, `training`, `programs`, `tables`, `sweep`; `cli` is a thin layer on top.
"""

__version__ = "0.1.0"
