"""An LLM as a zero-shot serving-configuration policy, through the official ``openai`` client.

The policy shows a chat model the task, the action schema and the latest window's metrics, and asks
for one JSON object: the :class:`~inferencegym.envs.actions.ServeAction` for the next window. The
reply is parsed strictly (JSON mode when the server supports it, else the first JSON object in the
text), validated by pydantic, and on failure the model is told what was wrong and asked again
(``max_retries`` times); after that the policy falls back to a fixed, safe action and counts it.

Configuration comes from the environment only (never from code or files):

* ``API_BASE_URL``: an OpenAI-compatible endpoint (default ``https://router.huggingface.co/v1``);
* ``MODEL_NAME``: the chat model (default ``Qwen/Qwen2.5-72B-Instruct``);
* ``HF_TOKEN`` or else ``OPENAI_API_KEY``: the key (required unless a client is passed in).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from inferencegym.envs import OBS_FEATURES, get_task
from inferencegym.envs.actions import InvalidActionError, ServeAction

DEFAULT_API_BASE_URL = "https://router.huggingface.co/v1"
DEFAULT_MODEL_NAME = "Qwen/Qwen2.5-72B-Instruct"

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


class ActionParseError(ValueError):
    """The model's reply is not a valid serving action (the message says why)."""


def _action_cls():
    return ServeAction


def fallback_action():
    """The action used when the model gives no valid answer: vLLM-like defaults."""
    return _action_cls()()


def _first_json_object(text: str) -> dict[str, Any]:
    """The first balanced ``{...}`` in ``text`` parsed as JSON (code fences allowed)."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for cand in candidates:
        start = cand.find("{")
        while start != -1:
            try:
                obj, _ = decoder.raw_decode(cand[start:])
            except json.JSONDecodeError:
                start = cand.find("{", start + 1)
                continue
            if isinstance(obj, dict):
                return obj
            start = cand.find("{", start + 1)
    raise ActionParseError(f"no JSON object found in the reply: {text[:200]!r}")


def parse_action(text: str | None):
    """Parse a model reply into a ``ServeAction``; raises :class:`ActionParseError` with the reason.

    Accepts a bare JSON object, one inside a code fence or surrounded by prose, or an object wrapped
    as ``{"action": {...}}``. Unknown keys and out-of-range values are errors (never clipped).
    """
    if not text or not text.strip():
        raise ActionParseError("empty reply")
    obj = _first_json_object(text)
    if set(obj) == {"action"} and isinstance(obj["action"], dict):
        obj = obj["action"]
    try:
        return _action_cls().from_any(obj)
    except InvalidActionError as exc:
        raise ActionParseError(str(exc)) from None


@dataclass
class LLMStats:
    """Counters over the policy's lifetime."""

    calls: int = 0
    """Chat completions requested (retries included)."""
    decisions: int = 0
    """Actions returned by ``act``."""
    retries: int = 0
    """Extra calls after an invalid reply."""
    fallbacks: int = 0
    """Decisions that used the fallback action after every attempt failed."""
    errors: list[str] = field(default_factory=list)
    """The last few error messages (parse or API)."""


SYSTEM_PROMPT = """You are the serving-configuration controller of an LLM inference cluster \
(the InferenceGym task "{task_id}"). Every control window you choose the configuration for the \
next window. Goals: serve the offered load within the latency SLOs (time to first token and time \
between tokens), keep the KV cache around 60-85% full, avoid preemptions, keep cost and the \
quantization quality loss low. Changes have switching costs (a quantization change reloads weights).
{task_description}
Reply with ONE JSON object and nothing else, with exactly these keys:
{schema}
Example: {example}"""


class LLMPolicy:
    """Zero-shot chat-model policy: ``act(obs, info) -> ServeAction``.

    Args:
        task_id: the task, shown to the model.
        model: chat model name (default: ``MODEL_NAME`` from the environment).
        base_url: OpenAI-compatible endpoint (default: ``API_BASE_URL`` from the environment).
        client: an ``openai.OpenAI`` instance to use instead of building one (tests, custom auth).
        max_retries: extra attempts after an invalid reply before falling back.
        json_mode: ask for ``response_format={"type": "json_object"}``; switched off automatically
            if the server rejects it.
        temperature: sampling temperature (0 for reproducibility where the server honours it).
        timeout_s: per-call timeout.
    """

    def __init__(self, task_id: str, *, model: str | None = None, base_url: str | None = None,
                 client: Any = None, max_retries: int = 2, json_mode: bool = True,
                 temperature: float = 0.0, timeout_s: float = 30.0, max_tokens: int = 200) -> None:
        self.task_id = task_id
        self.model = model or os.environ.get("MODEL_NAME") or DEFAULT_MODEL_NAME
        self.max_retries = int(max_retries)
        self.json_mode = json_mode
        self.temperature = float(temperature)
        self.max_tokens = int(max_tokens)
        if client is None:
            from openai import OpenAI

            key = os.environ.get("HF_TOKEN") or os.environ.get("OPENAI_API_KEY")
            if not key:
                raise RuntimeError("no API key: set HF_TOKEN (or OPENAI_API_KEY) in the environment "
                                   "for the LLM policy")
            client = OpenAI(base_url=base_url or os.environ.get("API_BASE_URL") or DEFAULT_API_BASE_URL,
                            api_key=key, timeout=timeout_s, max_retries=1)
        self.client = client
        self.stats = LLMStats()
        self.last_error: str | None = None
        """None after a valid reply; the reason when ``act`` fell back."""
        self._system = self._system_prompt()

    # ------------------------------------------------------------------------------------
    def _system_prompt(self) -> str:
        cls = _action_cls()
        desc = ""
        try:
            spec = get_task(self.task_id)
            desc = "Task: " + " ".join(str(getattr(spec, "description", "") or "").split())
        except Exception:  # the registry is optional for the prompt; never fatal
            desc = ""
        schema_lines = []
        for name, f in cls.model_fields.items():
            schema_lines.append(f'- "{name}": {f.description or ""}')
        example = json.dumps(cls().model_dump())
        return SYSTEM_PROMPT.format(task_id=self.task_id, task_description=desc,
                                    schema="\n".join(schema_lines), example=example)

    @staticmethod
    def describe_observation(obs: Any, info: dict | None) -> str:
        """The user message: the last window's raw metrics (``info["sim/<key>"]``) and the current
        configuration; the normalised vector with feature names when there is no ``info``.

        ``oracle/*`` entries (the hidden workload phase, for the clairvoyant reference only) are never
        shown to the model."""
        lines: list[str] = []
        if isinstance(info, dict):
            for k, v in info.items():
                if isinstance(k, str) and k.startswith("sim/") and isinstance(v, (int, float)):
                    lines.append(f"{k[4:]}: {round(float(v), 4)}")
            if isinstance(info.get("action"), dict):
                lines.append("current configuration: " + json.dumps(info["action"]))
        if not lines and obs is not None:
            try:
                import numpy as np


                vec = np.asarray(obs, dtype=float).ravel()
                names = list(OBS_FEATURES) if len(OBS_FEATURES) == vec.size else \
                    [f"f{i}" for i in range(vec.size)]
                lines += [f"{n} (normalised): {round(float(x), 4)}" for n, x in zip(names, vec)]
            except (TypeError, ValueError, ImportError):
                lines.append(f"observation: {obs!r:.1500}")
        return "Metrics of the last window:\n" + "\n".join(lines[:80])

    def _call(self, messages: list[dict]) -> str:
        kwargs: dict[str, Any] = dict(model=self.model, messages=messages,
                                      temperature=self.temperature, max_tokens=self.max_tokens)
        if self.json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        self.stats.calls += 1
        try:
            resp = self.client.chat.completions.create(**kwargs)
        except Exception as exc:
            import openai

            if self.json_mode and isinstance(exc, openai.BadRequestError):
                self.json_mode = False  # server without JSON mode: use the strict parser only
                kwargs.pop("response_format", None)
                self.stats.calls += 1
                resp = self.client.chat.completions.create(**kwargs)
            else:
                raise
        if not resp.choices:
            return ""
        return resp.choices[0].message.content or ""

    def act(self, obs: Any = None, info: dict | None = None):
        """The action for the next window (never raises on a bad reply: falls back instead)."""
        messages = [{"role": "system", "content": self._system},
                    {"role": "user", "content": self.describe_observation(obs, info)}]
        self.last_error = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.stats.retries += 1
            try:
                text = self._call(messages)
                action = parse_action(text)
            except ActionParseError as exc:
                self._record(f"invalid reply: {exc}")
                messages = messages + [
                    {"role": "assistant", "content": text[:1000]},
                    {"role": "user", "content": f"That was not a valid action: {exc}. Reply with one "
                                                 "JSON object with exactly the keys listed."}]
                continue
            except Exception as exc:  # API/network error: retry, then fall back
                self._record(f"API error: {type(exc).__name__}: {exc}")
                continue
            self.stats.decisions += 1
            self.last_error = None  # recovered (the failed attempts stay in stats.errors)
            return action
        self.stats.decisions += 1
        self.stats.fallbacks += 1
        self.last_error = f"fallback action after {self.max_retries + 1} attempts; last: {self.last_error}"
        return fallback_action()

    def _record(self, msg: str) -> None:
        self.last_error = msg
        self.stats.errors = (self.stats.errors + [msg])[-10:]


def make_llm_policy(task_id: str, **kwargs: Any) -> LLMPolicy:
    """Factory for the policy registry (``get_policy("llm", task_id)``)."""
    return LLMPolicy(task_id, **kwargs)
