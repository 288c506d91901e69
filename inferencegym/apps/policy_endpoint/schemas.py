"""Request and response bodies of the policy endpoint (pydantic v2).

``POST /act`` takes exactly one of ``observation`` (one observation) or ``observations`` (a list, at
most :data:`MAX_OBSERVATIONS_PER_REQUEST`). An observation is the JSON form of an element of the
policy's observation space: nested lists of numbers for a Box, an object of those for a Dict. The
shape and dtype are checked against the space after this schema (422 with the offending part).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

#: Upper bound on observations in one request (keeps one request from monopolising a batch).
MAX_OBSERVATIONS_PER_REQUEST = 1024


class ActRequest(BaseModel):
    """Body of ``POST /act``."""

    model_config = ConfigDict(extra="forbid")

    observation: JsonValue | None = Field(
        default=None, description="One observation (JSON form of an element of the observation space).")
    observations: list[JsonValue] | None = Field(
        default=None, max_length=MAX_OBSERVATIONS_PER_REQUEST,
        description="A batch of observations; the response has one action per observation, in order.")

    @model_validator(mode="after")
    def _exactly_one(self) -> "ActRequest":
        if (self.observation is None) == (self.observations is None):
            raise ValueError("give exactly one of 'observation' (one observation) or 'observations' "
                             "(a non-empty list of observations)")
        if self.observations is not None and not self.observations:
            raise ValueError("'observations' is empty; give at least one observation")
        return self

    @property
    def batched(self) -> bool:
        return self.observations is not None

    def items(self) -> list[Any]:
        return list(self.observations) if self.observations is not None else [self.observation]


class ActResponse(BaseModel):
    """Body answered by ``POST /act``: ``action`` for one observation, ``actions`` for a batch."""

    action: JsonValue | None = None
    actions: list[JsonValue] | None = None
    policy_version: str = Field(description="Content hash of the served checkpoint.")


class Health(BaseModel):
    status: str
    policy_version: str


class Metadata(BaseModel):
    task_id: str | None
    policy: str
    module_id: str | None
    checkpoint: str | None
    policy_version: str
    observation_space: dict[str, Any] | None
    action_space: dict[str, Any] | None
    max_batch_size: int
    max_observations_per_request: int = MAX_OBSERVATIONS_PER_REQUEST
