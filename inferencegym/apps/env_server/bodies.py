"""Request bodies of the OpenEnv server and the check of its WebSocket frames.

The HTTP routes and the WebSocket session (``/ws``) validate with the same strict models, so every
bound (seed <= 2**32-1, ids <= 128 characters, strict numbers) holds on both channels: a violating
body gets 422, a violating frame an error frame (see :mod:`inferencegym.apps.ws_guard`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inferencegym.apps.env_server.environment import InferenceGymAction
from inferencegym.apps.json_guard import scrub

MAX_GRADER_ACTIONS = 1000
"""Longest action list ``/grader`` accepts (the longest episode has 200 windows)."""
WS_MESSAGE_TYPES = ("reset", "step", "state", "close", "mcp")
"""The OpenEnv WebSocket message types."""

SESSION_ID_FIELD = Field(..., min_length=1, max_length=128, description="id returned by POST /reset")


# ---------------------------------------------------------------------------------------------
# Request bodies (pydantic: a violating body gets 422 with the reason)
class ResetFields(BaseModel):
    """What starts an episode: the WebSocket ``reset`` frame's ``data`` (and, with ``session_id``,
    the ``POST /reset`` body). Every field is optional (``{}`` starts a default episode)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "5" is not a seed, true not an int

    seed: int | None = Field(None, ge=0, le=2**32 - 1, description="episode seed (drawn if omitted)")
    task_id: str | None = Field(None, max_length=128, description="task (default: static_workload)")
    episode_id: str | None = Field(None, max_length=128, description="your label for the episode")
    split: str | None = Field(None, max_length=32, description="OpenEnv Task API split (\"test\")")
    index: int | None = Field(None, ge=0, le=10_000, description="OpenEnv Task API task index in the split")


class ResetBody(ResetFields):
    """``POST /reset`` body; every field is optional (``{}`` starts a default episode)."""

    session_id: str | None = Field(None, min_length=1, max_length=128,
                                   description="reuse this session instead of creating one")


class StepBody(BaseModel):
    """``POST /step`` body."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "5" is not a seed, true not an int

    session_id: str = SESSION_ID_FIELD
    action: InferenceGymAction = Field(..., description="the serving configuration (see /schema)")
    timeout_s: float | None = Field(None, gt=0, description="accepted for OpenEnv compatibility; unused")
    request_id: str | None = Field(None, max_length=128, description="accepted for OpenEnv compatibility")


class GraderBody(BaseModel):
    """``POST /grader`` body: a ``session_id`` (grade that session's episode so far, from the
    server's own record) or a submitted episode ``task_id`` + ``seed`` + ``actions``, which the
    server replays (the simulator is deterministic) and grades on the log it wrote itself. A
    client-written log or metric is never graded."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "5" is not a seed, true not an int

    session_id: str | None = Field(None, min_length=1, max_length=128)
    task_id: str | None = Field(None, max_length=128)
    seed: int | None = Field(None, ge=0, le=2**32 - 1, strict=True,
                             description="the episode's seed (GET /state reports it)")
    actions: list[InferenceGymAction] | None = Field(
        None, max_length=MAX_GRADER_ACTIONS,
        description="the episode's actions in order (one per window; fewer grades the episode so far)")
    episode_log: Any = Field(None, description="no longer accepted (a client-written log is not "
                                               "graded): send task_id, seed and actions")


class SuggestBody(BaseModel):
    """``POST /suggest`` body: what a baseline policy would do in the session's current state."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "5" is not a seed, true not an int

    session_id: str = SESSION_ID_FIELD
    policy: str = Field("heuristic", min_length=1, max_length=64)


def describe_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """One line naming each bad field, the reason and a short echo of what was given."""
    parts = []
    for e in exc.errors()[:5]:
        loc = ".".join(str(x) for x in (prefix, *e.get("loc", ())) if x != "")
        part = f"{scrub(loc, 64)}: {scrub(str(e.get('msg', '')), 120)}"
        if "input" in e and not isinstance(e["input"], (dict, list)):
            part += f" (given {scrub(repr(e['input']), 40)})"
        parts.append(part)
    more = len(exc.errors()) - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def validate_ws_frame(frame: dict[str, Any]) -> str | None:
    """None when an OpenEnv ``/ws`` frame may reach the session, else the one-line reason.

    ``reset`` data is checked against :class:`ResetFields` and ``step`` data against the action
    model, exactly as ``POST /reset`` and ``POST /step`` check their bodies."""
    kind = frame.get("type")
    if not isinstance(kind, str) or kind not in WS_MESSAGE_TYPES:
        return (f"unknown message type {scrub(repr(kind), 40)}; valid: {', '.join(WS_MESSAGE_TYPES)} "
                f"(a frame is {{\"type\": ..., \"data\": {{...}}}})")
    data = frame.get("data", {} if kind != "step" else None)
    if not isinstance(data, dict):
        return f"'data' of a {kind} message must be a JSON object, got {type(data).__name__}"
    try:
        if kind == "reset":
            ResetFields.model_validate(data)
        elif kind == "step":
            InferenceGymAction.model_validate(data)
    except ValidationError as exc:
        return f"invalid {kind} data: {describe_validation_error(exc, 'data')}"
    return None
