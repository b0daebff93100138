"""Pydantic building blocks shared by every config section (the config package, each model's
parameters, each dataset's parameters).

This module sits at the bottom of the import graph: it imports nothing from `gbcli`, so a model
module can declare its parameters without importing the config package that assembles them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section: unknown keys are refused and values are never coerced silently."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def explicitly_set(self) -> set[str]:
        """The keys the user wrote (a preset's keys count as written)."""
        return set(self.model_fields_set)
