"""What a cluster gives out besides window metrics: the per-replica feature matrix agents observe
(Vidur-style) and the per-request results table (numpy arrays, optionally Parquet)."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .recent import recent_p90

if TYPE_CHECKING:
    from .replica import Replica
    from .request import Request

FEATURE_NAMES = ("queue_len", "oldest_wait_s", "mean_wait_s", "running", "kv_occupancy",
                 "recent_p90_ttft_s", "recent_p90_tbt_s", "load_trend")
"""Columns of ``Cluster.replica_features()``."""


def feature_rows(replicas: Sequence[Replica], now: float) -> list:
    """The first seven columns of :data:`FEATURE_NAMES` for every replica, flat (replica after
    replica) as Python numbers before the float32 rounding of ``Cluster.replica_features()``:
    ``queue_len, oldest_wait_s, mean_wait_s, running, kv_occupancy, recent_p90_ttft_s,
    recent_p90_tbt_s``; the caller applies ``Cluster.sync()`` first. One pass over the replicas,
    shared by :class:`ReplicaFeatures` and the cluster env's router features."""
    vals: list = []
    r: Request  # (compiled: the queued requests' attributes read natively)
    for rep in replicas:
        pw, w = rep.prio_waiting, rep.waiting
        kv = rep.kv  # (Replica.kv_occupancy, inline)
        if pw or w:
            waits: list[float] = []
            for q in (pw, w):
                for r in q:
                    d = r.dispatched_s
                    waits.append(now - (d if d == d else r.arrival_s))
            k = len(waits)
            vals.extend((k, max(waits), sum(waits) / k, len(rep.running), kv.used_blocks / kv.capacity_blocks,
                         recent_p90(rep.recent_ttft), recent_p90(rep.recent_iter)))
        else:
            vals.extend((0, 0.0, 0.0, len(rep.running), kv.used_blocks / kv.capacity_blocks,
                         recent_p90(rep.recent_ttft), recent_p90(rep.recent_iter)))
    return vals


def router_rows(replicas: list, now: float, est: list[float], ema: list[float], inv_batch: list[float],
                inv_cap_slo: list[float], rel_speed: list[float], fits: list[bool], s_queue: float,
                s_ttft: float, s_tbt: float, ref_batch: float, ema_rate: float, prefix: list | None,
                clip: float) -> tuple[list[float], array]:
    """The cluster env's router rows, flat (replica after replica; columns of
    ``envs.cluster_spaces.ROUTER_FEATURES``, then the three prefix columns when ``prefix`` holds a
    tuple per replica), each value clipped to ``[-clip, clip]`` (NaN kept, as ``np.clip``), and the
    simulator's seven columns of :func:`feature_rows` rounded to float32 (as
    ``Cluster.replica_features()`` rounds them: every normalised value starts from them). Updates
    ``ema`` (the queue length's moving average, weight ``ema_rate``). Compiled with the simulator
    core: one loop over the replicas, no numpy call per column; each value is the column-wise
    float64 arithmetic's."""
    sim = array("f", feature_rows(replicas, now))
    sv: list[float] = sim.tolist()
    vals: list[float] = []
    c = clip
    m = -clip
    for i in range(len(replicas)):
        # each value clipped as ``c if x > c else (m if x < m else x)`` (written out: compiled, a
        # helper call or a loop over a tuple of the row would box every value)
        j = 7 * i
        q = sv[j]
        run = sv[j + 3]
        d = q - ema[i]
        x = q * s_queue
        vals.append(c if x > c else (m if x < m else x))
        x = sv[j + 1] * s_ttft
        vals.append(c if x > c else (m if x < m else x))
        x = sv[j + 2] * s_ttft
        vals.append(c if x > c else (m if x < m else x))
        x = run * inv_batch[i]
        vals.append(c if x > c else (m if x < m else x))
        x = sv[j + 4]
        vals.append(c if x > c else (m if x < m else x))
        x = sv[j + 5] * s_ttft
        vals.append(c if x > c else (m if x < m else x))
        x = sv[j + 6] * s_tbt
        vals.append(c if x > c else (m if x < m else x))
        x = d / ref_batch
        vals.append(c if x > c else (m if x < m else x))
        x = (q + run) * inv_cap_slo[i]
        vals.append(c if x > c else (m if x < m else x))
        x = rel_speed[i]
        vals.append(c if x > c else (m if x < m else x))
        x = 1.0 if fits[i] else 0.0
        vals.append(c if x > c else (m if x < m else x))
        x = est[i]
        vals.append(c if x > c else (m if x < m else x))
        if prefix is not None:
            for y in prefix[i]:
                x = y
                vals.append(c if x > c else (m if x < m else x))
        ema[i] += ema_rate * d
    return vals, sim


class ReplicaFeatures:
    """``(N, 8)`` float32 per-replica state; remembers the outstanding counts of its previous call
    for the load trend."""

    def __init__(self) -> None:
        self._prev: np.ndarray | None = None

    def __call__(self, replicas: Sequence[Replica], now: float) -> np.ndarray:
        n = len(replicas)
        vals = feature_rows(replicas, now)
        m = len(FEATURE_NAMES) - 1
        # Replica.outstanding, inline: queued + running + inbound
        outstanding = np.array([vals[m * i] + vals[m * i + 3] + rep.inbound for i, rep in enumerate(replicas)],
                               dtype=np.float64)
        out = np.zeros((n, m + 1), dtype=np.float32)
        # one float64 -> float32 conversion per value, as element-wise assignment does
        out[:, :m] = np.array(vals, dtype=np.float64).reshape(n, m)
        prev = self._prev
        out[:, m] = outstanding - prev if prev is not None else 0.0
        self._prev = outstanding
        return out


RESULT_FIELDS = ("req_id", "arrival_s", "prompt_tokens", "output_tokens", "tenant", "priority",
                 "replica_id", "prefill_replica_id", "dispatched_s", "first_scheduled_s",
                 "first_token_s", "completion_s", "preemptions", "tbt_max_s", "tbt_sum_s",
                 "kv_transfer_s", "generated_tokens", "cached_tokens")
"""Per-request columns copied from ``Request`` into ``Cluster.results()``."""


def results_table(reqs: Sequence[Request]) -> dict[str, np.ndarray]:
    """Per-request table (dict of equal-length numpy arrays), with derived ttft_s, tpot_s, e2e_s,
    queueing_delay_s, rejected and rejected_reason."""
    out: dict[str, np.ndarray] = {}
    for f in RESULT_FIELDS:
        out[f] = np.array([getattr(r, f) for r in reqs])
    if not reqs:
        for f in RESULT_FIELDS:
            out[f] = np.zeros(0)
    out["ttft_s"] = out["first_token_s"] - out["arrival_s"]
    out["e2e_s"] = out["completion_s"] - out["arrival_s"]
    out["queueing_delay_s"] = out["first_scheduled_s"] - out["arrival_s"]
    out["tpot_s"] = np.array([r.tpot_s if r.done else math.nan for r in reqs], dtype=float)
    out["rejected"] = np.array([r.rejected_reason is not None for r in reqs], dtype=bool)
    out["rejected_reason"] = np.array([r.rejected_reason or "" for r in reqs], dtype=object)
    return out


def write_parquet(table: dict[str, np.ndarray], path) -> None:
    """Write a results table to a Parquet file (pyarrow)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {k: (pa.array(list(v), type=pa.string()) if v.dtype == object else pa.array(v))
            for k, v in table.items()}
    pq.write_table(pa.table(cols), str(path))
