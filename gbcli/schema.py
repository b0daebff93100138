"""Pydantic building blocks of every config section; it imports nothing of gbcli, so a model module
declares its parameters without importing the config package."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section: unknown keys are refused and values are never coerced silently."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
