"""Reward accounting of the cluster env (weights: :class:`~inferencegym.envs.reward.ClusterRewardConfig`).

- :class:`RouterLedger` follows every dispatched request and charges the router, between two of its
  decisions, exactly the delay that accrued (Decima: the episode sum is minus the tenant-weighted
  total time in system), the latency terms of first tokens and the rejections; it also fills the
  per-replica accumulators of the current control window.
- :func:`replica_rewards` turns one window's accumulators into each replica agent's components.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inferencegym.envs.reward import ClusterRewardConfig, latency_term
from inferencegym.sim.slo import meets_slo
from inferencegym.sim.window_metrics import first_token_split, settled_split

ROUTER_COMPONENTS: tuple[str, ...] = ("queue", "slo", "reject")
REPLICA_COMPONENTS: tuple[str, ...] = ("throughput", "slo", "preemption", "shared")


class WindowAccumulators:
    """Per-replica figures of one control window."""

    def __init__(self, n: int):
        self.n = n
        self.first_tokens = np.zeros(n)
        self.slo_sum = np.zeros(n)
        self.dispatched = np.zeros(n)
        self.completed = np.zeros(n)          # requests completed in the window
        self.completed_ok = np.zeros(n)       # ... of which met their SLO (sim.slo.meets_slo)
        self.completed_tokens = np.zeros(n)   # output tokens of requests completed in the window
        self._prev_active_tokens = np.zeros(n)
        self._prev_active_preempt = np.zeros(n)
        self._cur_active_tokens = np.zeros(n)
        self._cur_active_preempt = np.zeros(n)

    def produced_tokens(self, active: list) -> np.ndarray:
        """Output tokens each replica produced in the window (finished plus in-flight progress)."""
        cur = np.zeros(self.n)
        for r in active:
            cur[r.replica_id] += r.generated_tokens
        self._cur_active_tokens = cur
        return self.completed_tokens + cur - self._prev_active_tokens

    def preemptions(self, active: list) -> np.ndarray:
        cur = np.zeros(self.n)
        for r in active:
            cur[r.replica_id] += r.preemptions
        self._cur_active_preempt = cur
        return np.maximum(0.0, cur - self._prev_active_preempt)

    def roll(self) -> None:
        """Start the next window (call after :meth:`produced_tokens` and :meth:`preemptions`)."""
        for a in (self.first_tokens, self.slo_sum, self.dispatched, self.completed, self.completed_ok,
                  self.completed_tokens):
            a[:] = 0
        self._prev_active_tokens = self._cur_active_tokens
        self._prev_active_preempt = self._cur_active_preempt


class RouterLedger:
    """The requests in the system and the router's reward since its previous decision."""

    def __init__(self, config: ClusterRewardConfig, tenant_weights: list[float],
                 ttft_slo_s: np.ndarray, n: int, tenants: tuple = ()):
        """``tenants``: objects with ``ttft_slo_s`` / ``tbt_slo_s`` (the task's tenants), for the
        replicas' SLO attainment by the one SLO rule (:func:`inferencegym.sim.slo.meets_slo`)."""
        self.config = config
        self._w = tenant_weights
        self._ttft_slo = ttft_slo_s
        self._tenants = tuple(tenants)
        self.n = n
        self.reset()

    def reset(self) -> None:
        self.active: list = []            # dispatched, not finished
        self._awaiting_first: list = []   # dispatched, no first token yet
        self._active_w = 0.0              # sum of tenant weights of the active requests
        self._last_s = 0.0
        self._settled: int | None = None  # the simulator's settled count at the last full sweep
        self.window = WindowAccumulators(self.n)
        self.components = dict.fromkeys(ROUTER_COMPONENTS, 0.0)

    def dispatched(self, req, replica: int, *, decided: bool = True) -> None:
        """Follow a request placed on ``replica`` (``decided=False``: the env placed it, no router
        decision: it is charged while in the system but earns no first-token term)."""
        self.active.append(req)
        self._active_w += self._w[req.tenant]
        if decided:
            self._awaiting_first.append(req)
            self.window.dispatched[replica] += 1

    def sweep(self, now: float, settled: int | None = None, first_tokens: bool = True) -> None:
        """Charge the interval (previous sweep, now]: Decima integral, first tokens, completions and
        rejections (exact: every request's own timestamps). ``settled``: the simulator's count of
        completed plus rejected requests (``RunLedger``); when it has not moved since the previous
        sweep no request in the system finished, and the pass over them is skipped.
        ``first_tokens=False`` says that no replica emitted a first token since the previous sweep
        (``Cluster.first_tokens_since``): with ``settled`` unmoved too (no rejection), no request
        awaiting its first token can leave that list, and the pass over it is skipped."""
        t0, w, win = self._last_s, self._w, self.window
        area = 0.0
        moved = settled is None or settled != self._settled
        if moved:
            self._settled = settled
            # a request whose engine is done but whose client's last token comes after now (the
            # front end's latency) stays in the system, charged to now (``leaving``)
            gone, self.active, leaving = settled_split(self.active, now)
            for r in gone:
                c = r.completion_s
                if c == c:  # completed (not NaN)
                    area += w[r.tenant] * (c - t0)
                    self._active_w -= w[r.tenant]
                    win.completed_tokens[r.replica_id] += r.output_tokens
                    win.completed[r.replica_id] += 1
                    if self._tenants and meets_slo(r, self._tenants[r.tenant]):
                        win.completed_ok[r.replica_id] += 1
                else:  # rejected
                    self._active_w -= w[r.tenant]
                    self.components["reject"] -= w[r.tenant]
            if leaving:  # the next sweep must pass over them again, though no request settles before it
                self._settled = None
        area += self._active_w * (now - t0)
        slo = 0.0
        if not (first_tokens or moved):  # nothing to collect: the same list, the same zero
            self.components["queue"] -= area / self.config.sojourn_ref_s
            self.components["slo"] += slo
            self._last_s = now
            return
        bonus = self.config.slo_bonus
        firsts, self._awaiting_first = first_token_split(self._awaiting_first)
        for r in firsts:
            ratio = (r.first_token_s - r.arrival_s) / self._ttft_slo[r.tenant]
            term = latency_term(ratio, bonus)
            slo += w[r.tenant] * term
            win.first_tokens[r.replica_id] += 1
            win.slo_sum[r.replica_id] += term
        self.components["queue"] -= area / self.config.sojourn_ref_s
        self.components["slo"] += slo
        self._last_s = now

    def take(self) -> tuple[float, dict[str, float]]:
        """The router's weighted reward and its components since the last take; starts anew."""
        c, acc = self.config, self.components
        total = c.w_queue * acc["queue"] + c.w_router_slo * acc["slo"] + c.w_reject * acc["reject"]
        self.components = dict.fromkeys(ROUTER_COMPONENTS, 0.0)
        return float(total), acc


@dataclass(frozen=True)
class ReplicaRewardWindow:
    """One window's replica figures: reward components (arrays over replicas) and observables."""

    components: dict[str, np.ndarray]
    total: np.ndarray
    throughput: np.ndarray
    slo_attainment: np.ndarray


def replica_rewards(ledger: RouterLedger, capacity_tokens_per_window: np.ndarray) -> ReplicaRewardWindow:
    """Each replica's reward components for the window that ends now (then rolls the window).

    ``throughput`` = output tokens produced / (capacity_rps x mean output length x window);
    ``slo`` = mean latency term of its first tokens (0 if none); ``preemption`` = -preemptions /
    max(1, its requests); ``shared`` = the cluster-wide mean latency term (the cooperative term).
    """
    win, c, n = ledger.window, ledger.config, ledger.n
    thr = win.produced_tokens(ledger.active) / capacity_tokens_per_window
    has = win.first_tokens > 0
    local_slo = np.where(has, win.slo_sum / np.maximum(win.first_tokens, 1), 0.0)
    # SLO attainment: the one rule (TTFT and TPOT, sim.slo) over the requests completed in the window
    attain = np.where(win.completed > 0, win.completed_ok / np.maximum(win.completed, 1), 1.0)
    tot_first = win.first_tokens.sum()
    shared = float(win.slo_sum.sum() / tot_first) if tot_first > 0 else 0.0
    preempt = win.preemptions(ledger.active)
    n_req = np.maximum(1, win.dispatched + np.bincount([r.replica_id for r in ledger.active],
                                                       minlength=n))
    comps = {"throughput": thr, "slo": local_slo, "preemption": -preempt / n_req,
             "shared": np.full(n, shared)}
    total = (c.w_throughput * comps["throughput"] + c.w_replica_slo * comps["slo"]
             + c.w_preemption * comps["preemption"] + c.w_shared * comps["shared"])
    win.roll()
    return ReplicaRewardWindow(components=comps, total=total, throughput=thr, slo_attainment=attain)
