"""The router's observation in the cluster env: per-replica feature rows with named columns.

:class:`RouterFeatures` reads the simulator (``Cluster.replica_features()`` plus the estimates of
:mod:`inferencegym.sim.estimates`) and writes the normalised matrix whose columns are
:data:`~inferencegym.envs.cluster_spaces.ROUTER_FEATURES`; columns are addressed by name through
:data:`~inferencegym.envs.cluster_spaces.COL`.
"""

from __future__ import annotations

import math
from array import array

import numpy as np

from inferencegym.envs.cluster_spaces import (
    FEATURE_CLIP,
    MAX_TENANTS,
    PREFIX_FEATURES,
    PROMPT_LOG_MAX_TOKENS,
    PROMPT_NORM_TOKENS,
    REQ,
    REQUEST_FEATURES,
    ROUTER_FEATURES,
    router_features,
)
from inferencegym.sim import Cluster
from inferencegym.sim.estimates import est_ttft_values
from inferencegym.sim.outputs import router_rows
from inferencegym.tasks.episode_workload import mean_output_tokens
from inferencegym.tasks.spec import TaskSpec

SIM_COLUMNS: tuple[tuple[str, str], ...] = (
    ("queue_len", "queue_len"), ("oldest_wait_s", "oldest_wait"), ("mean_wait_s", "mean_wait"),
    ("running", "running"), ("kv_occupancy", "kv_occupancy"), ("recent_p90_ttft_s", "p90_ttft"),
    ("recent_p90_tbt_s", "p90_tbt"))
"""(simulator column of ``Cluster.FEATURE_NAMES``, router feature) pairs copied with a normaliser,
in the same leading order."""
_N_SIM = len(SIM_COLUMNS)
QUEUE_EMA_RATE = 0.05
"""Per-decision weight of the queue length's moving average (``load_trend`` = queue - average)."""
HIT_RATE_DECAY = 0.02
"""Per-decision decay of the token counts behind ``recent_hit_rate`` (about the last 50 decisions)."""

_ROW_ORDER = ("queue_len", "oldest_wait", "mean_wait", "running", "kv_occupancy", "p90_ttft", "p90_tbt",
              "load_trend", "load_by_capacity", "relative_speed", "prompt_fits", "est_ttft",
              "cached_share", "cache_occupancy", "recent_hit_rate")
"""The order in which :meth:`RouterFeatures.replicas` writes a row (checked against the spaces)."""

if tuple(Cluster.FEATURE_NAMES[:_N_SIM]) != tuple(s for s, _ in SIM_COLUMNS) or \
        tuple(ROUTER_FEATURES[:_N_SIM]) != tuple(r for _, r in SIM_COLUMNS) or \
        ROUTER_FEATURES + PREFIX_FEATURES != _ROW_ORDER:
    raise RuntimeError(f"Cluster.FEATURE_NAMES {Cluster.FEATURE_NAMES} or the router's columns "
                       f"{ROUTER_FEATURES + PREFIX_FEATURES} no longer match the order RouterFeatures "
                       f"writes ({SIM_COLUMNS}, {_ROW_ORDER}); update cluster_features.py")


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
        self._s_queue = 1.0 / self.ref_batch
        self._s_ttft = 1.0 / self.ttft_ref
        self._s_tbt = 1.0 / self.tbt_ref

    def reset(self, cluster: Cluster, batch_caps: np.ndarray) -> None:
        self.cluster = cluster
        self._hit = [[0.0, 0.0] for _ in range(self.n)]  # decayed (hit tokens, queried tokens) per replica
        self._hit_seen = [[0.0, 0.0] for _ in range(self.n)]
        self._rel = self.relative_speed.tolist()
        self._inv_cs = self._inv_cap_slo.tolist()
        self._queue_ema = [0.0] * self.n
        self._iter_s_cache: dict[tuple[int, int], float] = {}
        self.on_knobs_changed(batch_caps)
        self._sim = array("f", bytes(4 * self.n * _N_SIM))  # zeros until the first replicas() call
        self.fits = [True] * self.n

    def on_knobs_changed(self, batch_caps: np.ndarray) -> None:
        """New knobs: the running column's normaliser (the batch cap) and the KV capacity change."""
        self._inv_batch = (1.0 / np.asarray(batch_caps, dtype=np.float64)).tolist()
        self.kv_capacity_tokens = kv_capacity_tokens(self.cluster)
        self._cap_tokens = self.kv_capacity_tokens.tolist()

    def replicas(self, prompt_tokens: int | None, req=None) -> np.ndarray:
        """The (N, F) float32 matrix for an arriving prompt (None: no request, e.g. at a window end);
        ``req`` (the arriving request) fills the prefix columns on prefix-sharing tasks.

        Built row by row in Python floats (one numpy array at the end): at the env's sizes (4-64
        replicas, 12-15 columns) a numpy call per column costs more than the arithmetic. Each value
        is computed as the column-wise float64 arithmetic computes it (the simulator's columns
        rounded to float32 first, as ``Cluster.replica_features()`` gives them), so the matrix is
        bit-identical to the vectorised form."""
        cl = self.cluster
        cl.sync()
        reps = cl.replicas
        est = [0.0] * self.n if prompt_tokens is None else self.est_ttft_list(prompt_tokens, req)
        need = prompt_tokens + 1 if prompt_tokens is not None else 0
        fits = [c >= need for c in self._cap_tokens]
        pre = self._prefix_columns(req) if self.prefix else None
        vals, sim = router_rows(reps, cl.now_s, est, self._queue_ema, self._inv_batch, self._inv_cs, self._rel,
                                fits, self._s_queue, self._s_ttft, self._s_tbt, self.ref_batch, QUEUE_EMA_RATE,
                                pre, FEATURE_CLIP)
        # the clip (in router_rows), then float32 as ``astype`` rounds (the same C cast): the same
        # as rounding first (the bounds are float32 numbers, the rounding monotonic); NaN kept
        out = np.frombuffer(array("f", vals), dtype=np.float32).reshape(self.n, -1)
        self._sim = sim
        self.fits = fits
        return out

    def outstanding_and_kv(self) -> tuple[np.ndarray, np.ndarray]:
        """(queued + running, KV occupancy) per replica (float32) from the simulator columns the
        last :meth:`replicas` call read (``_sim``, flat: columns 0 + 3 and column 4)."""
        f = np.frombuffer(self._sim, dtype=np.float32)
        return f[0::_N_SIM] + f[3::_N_SIM], f[4::_N_SIM]

    def _prefix_columns(self, req) -> list[tuple[float, float, float]]:
        """Per replica, in :data:`PREFIX_FEATURES` order: cached_share, cache_occupancy (both from
        the published cache view a real router reads) and recent_hit_rate (per-decision decayed
        token counts of the replicas' admissions)."""
        cl = self.cluster
        snaps = cl.published()
        keep = 1.0 - HIT_RATE_DECAY
        out = []
        for i, rep in enumerate(cl.replicas):
            hit, seen_prev = self._hit[i], self._hit_seen[i]
            for c, s in enumerate((float(rep.win.prefix_hit_tokens), float(rep.win.prefix_query_tokens))):
                d = s - seen_prev[c]
                if d < 0:
                    d = s  # the replica's window counters were reset
                seen_prev[c] = s
                hit[c] = hit[c] * keep + d
            out.append((cl.published_cached_tokens(i, req) / req.prompt_tokens if req is not None else 0.0,
                        len(snaps[i].hashes) / rep.kv.capacity_blocks,
                        hit[0] / max(hit[1], 1.0) if hit[1] > 0 else 0.0))
        return out

    def est_ttft(self, prompt_tokens: int, req=None) -> np.ndarray:
        """Estimated first-token time of the arriving request on every replica / TTFT SLO
        (:mod:`inferencegym.sim.estimates`, remaining outputs at the workload's mean output length).
        With ``req`` carrying a prefix hash chain, the prompt tokens the replica last published as
        cached are not prefilled (``Cluster.published_cached_tokens``), exactly as the
        ``estimated_ttft`` router credits them, so the column's argmin is that router's choice."""
        return np.array(self.est_ttft_list(prompt_tokens, req), dtype=np.float64)

    def est_ttft_list(self, prompt_tokens: int, req=None) -> list[float]:
        """:meth:`est_ttft` as a list of Python floats."""
        cl = self.cluster
        cached = ([cl.published_cached_tokens(i, req) for i in range(self.n)]
                  if req is not None and req.block_hashes else None)
        return est_ttft_values(cl.replicas, prompt_tokens, self._iter_s_cache, self.expected_output_tokens,
                               self.ttft_ref, cached)

    @staticmethod
    def request(req) -> np.ndarray:
        """The ``"request"`` vector (zeros when there is no request)."""
        rq = [0.0] * len(REQUEST_FEATURES)  # one float32 conversion per value, as element-wise assignment does
        if req is not None:
            rq[REQ["prompt_norm"]] = min(req.prompt_tokens / PROMPT_NORM_TOKENS, FEATURE_CLIP)
            rq[REQ["prompt_log"]] = math.log1p(req.prompt_tokens) / math.log1p(PROMPT_LOG_MAX_TOKENS)
            rq[REQ["tenant_0"] + min(req.tenant, MAX_TENANTS - 1)] = 1.0
            rq[REQ["priority"]] = req.priority
        return np.array(rq, dtype=np.float32)
