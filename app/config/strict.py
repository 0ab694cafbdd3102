"""The base of every config section: unknown keys refused, values frozen once loaded."""

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
