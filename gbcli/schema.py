"""Pydantic building blocks of every config section; it imports nothing of gbcli, so a model module
declares its parameters without importing the config package."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section: unknown keys are refused and values are never coerced silently."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def explicitly_set(self) -> set[str]:
        """The keys the user wrote (a preset's keys count as written)."""
        return set(self.model_fields_set)
