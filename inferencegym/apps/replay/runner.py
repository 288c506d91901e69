"""Send a workload to a real OpenAI-compatible server as streamed requests and time every token.

Each request of the workload is sent at its arrival time (times ``time_scale``) from the start of
the run, with a prompt of about ``prompt_tokens`` tokens and ``max_tokens = output_tokens``; at most
``concurrency`` requests are in flight (later ones wait on the client, and that wait is recorded as
``client_wait_s``). From the stream we record, per request, the time of the first and of every later
content chunk, in the simulator's per-request schema (``Cluster.results()`` column names):
``arrival_s``, ``dispatched_s``, ``first_token_s``, ``completion_s``, ``generated_tokens``,
``tbt_max_s``, ``tbt_sum_s``, ``ttft_s``, ``tpot_s``, ``e2e_s``, ``rejected``/``rejected_reason``
(here: the error, if the request failed). All times are seconds from the start of the run.

One streamed chunk is one token on vLLM and TGI. When a server packs several tokens per chunk (the
final usage chunk reports more completion tokens than chunks), the gaps are per chunk; the
``chunks`` column shows it.

The official ``openai`` client does the HTTP (``AsyncOpenAI``); the key comes from the environment.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from inferencegym.apps.replay.engine_metrics import hit_rate_delta, metrics_url, read_prefix_counters

# Common English words that are one token in Llama / GPT tokenizers (with their leading space).
_WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at "
          "which but have an they you were her she there been one all we their has would when if "
          "so no more can will what about up out them some time then its only into other could "
          "these two may first new also any after how where most over such our well way even "
          "make many did because down back just good each those people see much must life day "
          "same work use long great little world own still old year man state last place").split()


@dataclass(frozen=True, kw_only=True)
class ReplayConfig:
    """How to replay a workload against a real endpoint."""

    endpoint: str
    """OpenAI-compatible base URL, e.g. ``http://127.0.0.1:8000/v1`` (vLLM) or a hosted API."""
    model: str
    """Model name the server expects."""
    max_requests: int = 200
    """Send at most this many requests (the first ones by arrival time)."""
    concurrency: int = 16
    """Requests in flight at most; later arrivals wait on the client (recorded as client_wait_s)."""
    time_scale: float = 1.0
    """Multiply arrival times by this (0.5 = twice the rate). Must be > 0."""
    request_timeout_s: float = 300.0
    """Give up on one request after this long (recorded as an error)."""
    max_prompt_tokens: int = 8192
    """Prompts are clipped to this many tokens (stated clip; keep below the model's context)."""
    max_output_tokens: int = 1024
    """``max_tokens`` is clipped to this (stated clip)."""
    api: Literal["chat", "completions"] = "chat"
    """``/chat/completions`` or ``/completions``."""
    ignore_eos: bool = False
    """Send vLLM's ``ignore_eos`` + ``min_tokens`` so exactly ``max_tokens`` tokens are generated
    (only for servers that accept these extra fields)."""
    seed: int = 0
    """Seed of the prompt text (numpy Generator); the same seed sends the same prompts."""
    warmup: bool = True
    """Send one untimed 1-token request first (fails fast with a clear error if the endpoint or
    model is wrong)."""

    def __post_init__(self) -> None:
        if not self.endpoint.startswith(("http://", "https://")):
            raise ValueError(f"endpoint must be an http(s) URL like http://127.0.0.1:8000/v1, got "
                             f"{self.endpoint!r}")
        if self.max_requests < 1:
            raise ValueError(f"max_requests must be >= 1, got {self.max_requests}")
        if not 1 <= self.concurrency <= 4096:
            raise ValueError(f"concurrency must be in 1..4096, got {self.concurrency}")
        if not (self.time_scale > 0 and math.isfinite(self.time_scale)):
            raise ValueError(f"time_scale must be a finite number > 0, got {self.time_scale}")
        if self.request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")
        if self.max_prompt_tokens < 1 or self.max_output_tokens < 1:
            raise ValueError("max_prompt_tokens and max_output_tokens must be >= 1")
        if self.api not in ("chat", "completions"):
            raise ValueError(f"api must be 'chat' or 'completions', got {self.api!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ReplayResult:
    """Per-request records (simulator schema, numpy arrays) plus pooled inter-token gaps."""

    records: dict[str, np.ndarray]
    itl_s: np.ndarray
    """Every gap between consecutive streamed chunks, all requests pooled (seconds)."""
    config: dict[str, Any]
    wall_s: float
    clipped: dict[str, int] = field(default_factory=dict)
    """How many prompts / outputs were clipped by the config's limits."""
    engine_prefix: dict[str, Any] | None = None
    """The engine's prefix-cache counters over the run (``engine_metrics.hit_rate_delta``), or None."""

    def __len__(self) -> int:
        return int(self.records["req_id"].shape[0])

    @property
    def ok(self) -> np.ndarray:
        return ~self.records["rejected"]

    def write_parquet(self, path: str) -> None:
        """The records as Parquet (same column names as ``Cluster.write_parquet``)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        cols = {k: (pa.array(list(v), type=pa.string()) if v.dtype == object else pa.array(v))
                for k, v in self.records.items()}
        table = pa.table(cols).replace_schema_metadata({"inferencegym.apps.replay": str(self.config)})
        tmp = f"{path}.tmp-{os.getpid()}"
        pq.write_table(table, tmp)
        os.replace(tmp, path)


def make_prompt(n_tokens: int, req_id: int, rng: np.random.Generator) -> str:
    """About ``n_tokens`` tokens of text, unique per request (defeats prefix caching)."""
    n = max(1, int(n_tokens) - 4)
    words = rng.choice(np.array(_WORDS), size=n)
    return f"Request {req_id}: " + " ".join(words.tolist())


def _api_key() -> str:
    return os.environ.get("OPENAI_API_KEY") or os.environ.get("HF_TOKEN") or "EMPTY"


async def _replay_async(arrival_s: np.ndarray, prompt_tokens: np.ndarray, output_tokens: np.ndarray,
                        cfg: ReplayConfig, on_done: Callable[[], None] | None,
                        client: Any = None, prompts: list[str] | None = None
                        ) -> tuple[list[dict[str, Any]], list[float], float]:
    from openai import AsyncOpenAI

    n = arrival_s.shape[0]
    if prompts is None:
        rng = np.random.default_rng(cfg.seed)
        prompts = [make_prompt(int(prompt_tokens[i]), i, rng) for i in range(n)]
    own_client = client is None
    if own_client:
        import httpx

        client = AsyncOpenAI(base_url=cfg.endpoint, api_key=_api_key(), max_retries=0,
                             timeout=cfg.request_timeout_s,
                             http_client=httpx.AsyncClient(
                                 limits=httpx.Limits(max_connections=cfg.concurrency + 4,
                                                     max_keepalive_connections=cfg.concurrency),
                                 timeout=cfg.request_timeout_s))
    if cfg.warmup:
        # one untimed 1-token request first (as vLLM's benchmark_serving does): the client's lazy
        # imports and the first connection would otherwise be charged to the first timed request
        try:
            kw0: dict[str, Any] = dict(model=cfg.model, max_tokens=1, stream=True)
            if cfg.api == "chat":
                s0 = await client.chat.completions.create(
                    messages=[{"role": "user", "content": "warm-up"}], **kw0)
            else:
                s0 = await client.completions.create(prompt="warm-up", **kw0)
            async for _ in s0:
                pass
        except Exception as exc:
            raise ConnectionError(f"warm-up request to {cfg.endpoint} (model {cfg.model!r}) failed: "
                                  f"{type(exc).__name__}: {str(exc)[:300]}") from exc
    sem = asyncio.Semaphore(cfg.concurrency)
    clock = time.perf_counter
    gaps: list[float] = []
    rows: list[dict[str, Any]] = [{} for _ in range(n)]
    extra = {"ignore_eos": True} if cfg.ignore_eos else None
    t0 = clock() + 0.05  # a small lead so the first request is not late

    async def one(i: int) -> None:
        due = t0 + float(arrival_s[i]) * cfg.time_scale
        delay = due - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        row = rows[i]
        row.update(req_id=i, arrival_s=due - t0, prompt_tokens=int(prompt_tokens[i]),
                   output_tokens=int(output_tokens[i]))
        times: list[float] = []
        usage_out = usage_in = usage_cached = None
        error = None
        async with sem:
            sent = clock()
            row["dispatched_s"] = sent - t0
            n_out = int(output_tokens[i])
            try:
                kw: dict[str, Any] = dict(model=cfg.model, max_tokens=n_out, stream=True,
                                          stream_options={"include_usage": True}, temperature=0.0)
                if extra is not None:
                    kw["extra_body"] = {**extra, "min_tokens": n_out}
                if cfg.api == "chat":
                    stream = await client.chat.completions.create(
                        messages=[{"role": "user", "content": prompts[i]}], **kw)
                else:
                    stream = await client.completions.create(prompt=prompts[i], **kw)
                async for chunk in stream:
                    t = clock()
                    if chunk.choices:
                        c = chunk.choices[0]
                        text = (c.delta.content if cfg.api == "chat" and c.delta else
                                getattr(c, "text", None))
                        if text:
                            times.append(t)
                    usage = getattr(chunk, "usage", None)
                    if usage is not None:
                        usage_out = usage.completion_tokens
                        usage_in = usage.prompt_tokens
                        details = getattr(usage, "prompt_tokens_details", None)
                        usage_cached = getattr(details, "cached_tokens", None) if details else None
            except Exception as exc:  # recorded per request; the run goes on
                error = f"{type(exc).__name__}: {str(exc)[:300]}"
        if error is None and not times:
            error = "stream ended without any content"
        row["rejected_reason"] = error or ""
        row["chunks"] = len(times)
        row["generated_tokens"] = int(usage_out) if usage_out is not None else len(times)
        row["prompt_tokens_reported"] = int(usage_in) if usage_in is not None else -1
        row["cached_tokens_reported"] = int(usage_cached) if usage_cached is not None else -1
        if times:
            d = np.diff(np.asarray(times))
            gaps.extend(d.tolist())
            row["first_token_s"] = times[0] - t0
            row["completion_s"] = times[-1] - t0
            row["tbt_max_s"] = float(d.max()) if d.size else 0.0
            row["tbt_sum_s"] = float(d.sum()) if d.size else 0.0
        if on_done is not None:
            on_done()

    try:
        await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        if own_client:
            await client.close()
    return rows, gaps, clock() - t0


def _records(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    nan = math.nan
    n = len(rows)

    def col(name: str, default: Any, dtype: Any) -> np.ndarray:
        return np.array([r.get(name, default) for r in rows], dtype=dtype) if n else np.zeros(0, dtype)

    out = {
        "req_id": col("req_id", -1, np.int64),
        "arrival_s": col("arrival_s", nan, float),
        "prompt_tokens": col("prompt_tokens", 0, np.int64),
        "output_tokens": col("output_tokens", 0, np.int64),
        "tenant": np.zeros(n, np.int64),
        "priority": np.zeros(n, np.int64),
        "replica_id": np.full(n, -1, np.int64),
        "dispatched_s": col("dispatched_s", nan, float),
        "first_scheduled_s": np.full(n, nan),  # not observable from the client
        "first_token_s": col("first_token_s", nan, float),
        "completion_s": col("completion_s", nan, float),
        "preemptions": np.full(n, -1, np.int64),  # not observable from the client
        "tbt_max_s": col("tbt_max_s", nan, float),
        "tbt_sum_s": col("tbt_sum_s", nan, float),
        "generated_tokens": col("generated_tokens", 0, np.int64),
        "chunks": col("chunks", 0, np.int64),
        "prompt_tokens_reported": col("prompt_tokens_reported", -1, np.int64),
        "cached_tokens_reported": col("cached_tokens_reported", -1, np.int64),
    }
    out["ttft_s"] = out["first_token_s"] - out["arrival_s"]
    out["e2e_s"] = out["completion_s"] - out["arrival_s"]
    out["client_wait_s"] = out["dispatched_s"] - out["arrival_s"]
    with np.errstate(invalid="ignore", divide="ignore"):
        steps = np.maximum(out["chunks"] - 1, 0)
        out["tpot_s"] = np.where(steps > 0, out["tbt_sum_s"] / np.maximum(steps, 1), np.nan)
    reasons = np.array([r.get("rejected_reason", "") or "" for r in rows], dtype=object)
    out["rejected"] = np.array([bool(x) for x in reasons], dtype=bool)
    out["rejected_reason"] = reasons
    return out


def prepare_workload(arrival_s: Any, prompt_tokens: Any, output_tokens: Any,
                     cfg: ReplayConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, int]]:
    """First ``max_requests`` by arrival, rebased to 0, lengths clipped to the config's limits."""
    a = np.asarray(arrival_s, dtype=float)
    p = np.asarray(prompt_tokens, dtype=np.int64)
    o = np.asarray(output_tokens, dtype=np.int64)
    if not (a.shape == p.shape == o.shape) or a.ndim != 1:
        raise ValueError(f"arrival_s, prompt_tokens and output_tokens must be 1-D and equal length, "
                         f"got {a.shape}, {p.shape}, {o.shape}")
    if a.size == 0:
        raise ValueError("the workload has no requests")
    order = np.argsort(a, kind="stable")[: cfg.max_requests]
    a, p, o = a[order], p[order], o[order]
    a = a - a[0]
    clipped = {"prompts": int((p > cfg.max_prompt_tokens).sum()),
               "outputs": int((o > cfg.max_output_tokens).sum())}
    p = np.clip(p, 1, cfg.max_prompt_tokens)
    o = np.clip(o, 1, cfg.max_output_tokens)
    return a, p, o, clipped


def run_replay(arrival_s: Any, prompt_tokens: Any, output_tokens: Any, cfg: ReplayConfig, *,
               on_done: Callable[[], None] | None = None, client: Any = None,
               prompts: list[str] | None = None, engine_metrics: bool = True) -> ReplayResult:
    """Replay the workload (see the module docstring); blocks until every request ended.

    ``prompts``: the text of each request in arrival order (e.g. from hash chains,
    ``inferencegym.workload.prompt_text.workload_prompts``); default: unique word salad.
    ``engine_metrics``: read the engine's prefix-cache counters (``/metrics``) before and after.
    """
    a, p, o, clipped = prepare_workload(arrival_s, prompt_tokens, output_tokens, cfg)
    if prompts is not None:  # same order as prepare_workload: stable by arrival, first max_requests
        if len(prompts) != np.asarray(arrival_s).size:
            raise ValueError(f"{len(prompts)} prompts for {np.asarray(arrival_s).size} requests")
        order = np.argsort(np.asarray(arrival_s, dtype=float), kind="stable")[: cfg.max_requests]
        prompts = [prompts[i] for i in order.tolist()]
    url = metrics_url(cfg.endpoint)
    before = read_prefix_counters(url) if engine_metrics else None
    rows, gaps, wall = asyncio.run(_replay_async(a, p, o, cfg, on_done, client, prompts))
    after = read_prefix_counters(url) if before is not None else None
    return ReplayResult(records=_records(rows), itl_s=np.asarray(gaps, dtype=float),
                        config=cfg.to_dict(), wall_s=wall, clipped=clipped,
                        engine_prefix=hit_rate_delta(before, after))
