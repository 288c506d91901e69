"""The router's observation in the cluster env: per-replica feature rows with named columns.

:class:`RouterFeatures` reads the simulator (``Cluster.replica_features()`` plus the estimates of
:mod:`inferencegym.sim.estimates`) and writes the normalised matrix whose columns are
:data:`~inferencegym.envs.cluster_spaces.ROUTER_FEATURES`; columns are addressed by name through
:data:`~inferencegym.envs.cluster_spaces.COL`.
"""

from __future__ import annotations

import math

import numpy as np

from inferencegym.envs.cluster_spaces import (
    COL,
    FEATURE_CLIP,
    MAX_TENANTS,
    PROMPT_LOG_MAX_TOKENS,
    PROMPT_NORM_TOKENS,
    REQ,
    REQUEST_FEATURES,
    ROUTER_FEATURES,
    router_features,
)
from inferencegym.sim import Cluster
from inferencegym.sim.estimates import decode_iteration_s, first_token_iterations
from inferencegym.tasks.episode_workload import mean_output_tokens
from inferencegym.tasks.spec import TaskSpec

SIM_COLUMNS: tuple[tuple[str, str], ...] = (
    ("queue_len", "queue_len"), ("oldest_wait_s", "oldest_wait"), ("mean_wait_s", "mean_wait"),
    ("running", "running"), ("kv_occupancy", "kv_occupancy"), ("recent_p90_ttft_s", "p90_ttft"),
    ("recent_p90_tbt_s", "p90_tbt"))
"""(simulator column of ``Cluster.FEATURE_NAMES``, router feature) pairs copied with a normaliser;
both in the same leading order, so one vectorised multiply fills them."""
_N_SIM = len(SIM_COLUMNS)
_SIM_QUEUE = Cluster.FEATURE_NAMES.index("queue_len")
_SIM_RUNNING = Cluster.FEATURE_NAMES.index("running")
QUEUE_EMA_RATE = 0.05
"""Per-decision weight of the queue length's moving average (``load_trend`` = queue - average)."""
HIT_RATE_DECAY = 0.02
"""Per-decision decay of the token counts behind ``recent_hit_rate`` (about the last 50 decisions)."""

if tuple(Cluster.FEATURE_NAMES[:_N_SIM]) != tuple(s for s, _ in SIM_COLUMNS) or \
        tuple(ROUTER_FEATURES[:_N_SIM]) != tuple(r for _, r in SIM_COLUMNS):
    raise RuntimeError(f"Cluster.FEATURE_NAMES {Cluster.FEATURE_NAMES} no longer lead with the columns "
                       f"the cluster env copies {SIM_COLUMNS}; update SIM_COLUMNS")


def kv_capacity_tokens(cluster: Cluster) -> np.ndarray:
    """KV-cache capacity of every replica in tokens."""
    return np.array([rep.kv.capacity_blocks * rep.kv.block_size for rep in cluster.replicas],
                    dtype=np.float64)


class RouterFeatures:
    """Builds the router's ``"replicas"`` matrix and ``"request"`` vector for one episode."""

    def __init__(self, task: TaskSpec, capacity_rps: np.ndarray):
        self.n = task.replicas
        self.ref_batch = float(task.ref_batch)
        self.ttft_ref = min(t.ttft_slo_s for t in task.tenants)
        self.tbt_ref = min(t.tbt_slo_s for t in task.tenants)
        self.expected_output_tokens = mean_output_tokens(task.workload)
        """Every running request's remaining output is estimated at the workload's mean length."""
        self.relative_speed = capacity_rps / capacity_rps.mean()
        self._inv_cap_slo = 1.0 / (capacity_rps * self.ttft_ref)
        self.columns = router_features(task)
        """This task's column names (12, or 15 with the prefix columns)."""
        self.prefix = len(self.columns) > len(ROUTER_FEATURES)

    def reset(self, cluster: Cluster, batch_caps: np.ndarray) -> None:
        self.cluster = cluster
        self._buf = np.zeros((self.n, len(self.columns)))
        self._hit = np.zeros((self.n, 2))  # decayed (hit tokens, queried tokens) per replica
        self._hit_seen = np.zeros((self.n, 2))
        self._buf[:, COL["relative_speed"]] = self.relative_speed
        self._queue_ema = np.zeros(self.n)
        self._iter_s_cache: dict[tuple[int, int], float] = {}
        self.on_knobs_changed(batch_caps)
        self.last_sim = np.zeros((self.n, len(Cluster.FEATURE_NAMES)))
        self.fits = np.ones(self.n, dtype=bool)

    def on_knobs_changed(self, batch_caps: np.ndarray) -> None:
        """New knobs: the running column's normaliser (the batch cap) and the KV capacity change."""
        sc = np.empty((self.n, _N_SIM))
        sc[:, COL["queue_len"]] = 1.0 / self.ref_batch
        for name in ("oldest_wait", "mean_wait", "p90_ttft"):
            sc[:, COL[name]] = 1.0 / self.ttft_ref
        sc[:, COL["running"]] = 1.0 / batch_caps
        sc[:, COL["kv_occupancy"]] = 1.0
        sc[:, COL["p90_tbt"]] = 1.0 / self.tbt_ref
        self._scale = sc
        self.kv_capacity_tokens = kv_capacity_tokens(self.cluster)

    def replicas(self, prompt_tokens: int | None, req=None) -> np.ndarray:
        """The (N, F) float32 matrix for an arriving prompt (None: no request, e.g. at a window end);
        ``req`` (the arriving request) fills the prefix columns on prefix-sharing tasks."""
        f = self.cluster.replica_features()
        out = self._buf
        np.multiply(f[:, :_N_SIM], self._scale, out=out[:, :_N_SIM])
        q, running = f[:, _SIM_QUEUE], f[:, _SIM_RUNNING]
        out[:, COL["load_trend"]] = (q - self._queue_ema) / self.ref_batch
        out[:, COL["load_by_capacity"]] = (q + running) * self._inv_cap_slo
        fits = self.kv_capacity_tokens >= (prompt_tokens + 1 if prompt_tokens is not None else 0)
        out[:, COL["prompt_fits"]] = fits
        out[:, COL["est_ttft"]] = 0.0 if prompt_tokens is None else self.est_ttft(prompt_tokens, req)
        self._queue_ema += QUEUE_EMA_RATE * (q - self._queue_ema)
        if self.prefix:
            self._prefix_columns(out, req)
        np.clip(out, -FEATURE_CLIP, FEATURE_CLIP, out=out)
        self.last_sim = f
        self.fits = fits
        return out.astype(np.float32)

    def _prefix_columns(self, out: np.ndarray, req) -> None:
        """cached_share, cache_occupancy (both from the published cache view a real router reads)
        and recent_hit_rate (per-decision decayed token counts of the replicas' admissions)."""
        cl = self.cluster
        snaps = cl.published()
        seen = np.array([(rep.win.prefix_hit_tokens, rep.win.prefix_query_tokens) for rep in cl.replicas],
                        dtype=np.float64)
        delta = seen - self._hit_seen
        delta[delta < 0] = seen[delta < 0]  # the replica's window counters were reset
        self._hit_seen = seen
        self._hit = self._hit * (1.0 - HIT_RATE_DECAY) + delta
        out[:, COL["recent_hit_rate"]] = np.where(self._hit[:, 1] > 0,
                                                  self._hit[:, 0] / np.maximum(self._hit[:, 1], 1.0), 0.0)
        for i, rep in enumerate(cl.replicas):
            out[i, COL["cache_occupancy"]] = len(snaps[i].hashes) / rep.kv.capacity_blocks
            out[i, COL["cached_share"]] = (cl.published_cached_tokens(i, req) / req.prompt_tokens
                                           if req is not None else 0.0)

    def est_ttft(self, prompt_tokens: int, req=None) -> np.ndarray:
        """Estimated first-token time of the arriving request on every replica / TTFT SLO
        (:mod:`inferencegym.sim.estimates`, remaining outputs at the workload's mean output length).
        With ``req`` carrying a prefix hash chain, the prompt tokens the replica last published as
        cached are not prefilled (``Cluster.published_cached_tokens``), exactly as the
        ``estimated_ttft`` router credits them, so the column's argmin is that router's choice."""
        est = np.empty(self.n)
        cache = self._iter_s_cache
        cl = self.cluster
        hashed = req is not None and bool(req.block_hashes)
        for i, rep in enumerate(cl.replicas):
            key = (i, rep.cfg.batch_cap)
            it = cache.get(key)
            if it is None:
                it = cache[key] = decode_iteration_s(rep)
            cached = cl.published_cached_tokens(i, req) if hashed else 0
            est[i] = first_token_iterations(rep, prompt_tokens, cached_tokens=cached,
                                            expected_output_tokens=self.expected_output_tokens) * it
        return est / self.ttft_ref

    @staticmethod
    def request(req) -> np.ndarray:
        """The ``"request"`` vector (zeros when there is no request)."""
        rq = np.zeros(len(REQUEST_FEATURES), dtype=np.float32)
        if req is not None:
            rq[REQ["prompt_norm"]] = min(req.prompt_tokens / PROMPT_NORM_TOKENS, FEATURE_CLIP)
            rq[REQ["prompt_log"]] = math.log1p(req.prompt_tokens) / math.log1p(PROMPT_LOG_MAX_TOKENS)
            rq[REQ["tenant_0"] + min(req.tenant, MAX_TENANTS - 1)] = 1.0
            rq[REQ["priority"]] = req.priority
        return rq
