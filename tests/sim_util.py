"""Helpers for the simulator tests (workload builders, result comparison)."""

from __future__ import annotations

import numpy as np

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, Request, TenantSpec


def poisson_requests(rng: np.random.Generator, *, rate: float, duration_s: float, prompt=(16, 1024),
                     output=(1, 256), tenants: int = 1, priority_tenant: int | None = None,
                     start_s: float = 0.0, first_id: int = 0) -> list[Request]:
    """Poisson arrivals; prompt/output lengths uniform in the given inclusive ranges (or fixed ints)."""
    n = int(rng.poisson(rate * duration_s))
    t = np.sort(rng.uniform(start_s, start_s + duration_s, n))

    def draw(spec):
        if isinstance(spec, int):
            return np.full(n, spec)
        return rng.integers(spec[0], spec[1] + 1, n)

    p, o = draw(prompt), draw(output)
    ten = rng.integers(0, tenants, n) if tenants > 1 else np.zeros(n, int)
    return [Request(req_id=first_id + i, arrival_s=float(t[i]), prompt_tokens=int(p[i]),
                    output_tokens=int(o[i]), tenant=int(ten[i]),
                    priority=int(priority_tenant is not None and ten[i] == priority_tenant))
            for i in range(n)]


def run(cfg: ClusterConfig, reqs: list[Request], seed: int = 0, windows: float | None = None, **kw) -> Cluster:
    c = Cluster(cfg, np.random.default_rng(seed), **kw)
    c.submit(reqs)
    if windows:
        t = 0.0
        while c.n_completed + c.n_rejected < c.n_submitted:
            t += windows
            c.run_until(t)
            c.window_stats(reset=True)
    else:
        c.drain()
    return c


def cfg(**kw) -> ClusterConfig:
    rkeys = set(ReplicaConfig.__dataclass_fields__)
    rk = {k: v for k, v in kw.items() if k in rkeys}
    ck = {k: v for k, v in kw.items() if k not in rkeys}
    return ClusterConfig(replica=ReplicaConfig(**rk), **ck)


def clone(reqs: list[Request]) -> list[Request]:
    return [Request(req_id=r.req_id, arrival_s=r.arrival_s, prompt_tokens=r.prompt_tokens,
                    output_tokens=r.output_tokens, tenant=r.tenant, priority=r.priority) for r in reqs]


def results_equal(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if x.dtype.kind == "f":
            if not np.array_equal(x, y, equal_nan=True):
                return False
        elif not np.array_equal(x, y):
            return False
    return True


def prefix_requests(rng: np.random.Generator, *, rate: float, duration_s: float, block_size: int = 16,
                    n_prefixes: int = 4, prefix_blocks=(2, 40), suffix=(1, 400), output=(1, 200),
                    tenants: int = 1, priority_tenant: int | None = None, first_id: int = 0) -> list[Request]:
    """Poisson arrivals sharing ``n_prefixes`` prompt prefixes (uniform popularity): prompt = a
    prefix of whole blocks + a private suffix; ``block_hashes`` chained per simulator block."""
    n = int(rng.poisson(rate * duration_s))
    t = np.sort(rng.uniform(0.0, duration_s, n))
    plen = rng.integers(prefix_blocks[0], prefix_blocks[1] + 1, n_prefixes)
    out = []
    for i in range(n):
        p = int(rng.integers(n_prefixes))
        prompt = int(plen[p]) * block_size + int(rng.integers(suffix[0], suffix[1] + 1))
        full = prompt // block_size
        hashes = tuple((p + 1) * 1_000_003 + j if j < plen[p] else -((first_id + i + 1) * 100_003 + j)
                       for j in range(full))
        ten = int(rng.integers(tenants)) if tenants > 1 else 0
        out.append(Request(req_id=first_id + i, arrival_s=float(t[i]), prompt_tokens=prompt,
                           output_tokens=int(rng.integers(output[0], output[1] + 1)), tenant=ten,
                           priority=int(priority_tenant is not None and ten == priority_tenant),
                           block_hashes=hashes))
    return out


def clone_with_hashes(reqs: list[Request]) -> list[Request]:
    return [Request(req_id=r.req_id, arrival_s=r.arrival_s, prompt_tokens=r.prompt_tokens,
                    output_tokens=r.output_tokens, tenant=r.tenant, priority=r.priority,
                    block_hashes=r.block_hashes) for r in reqs]


def same_bits(a, b) -> bool:
    """``a`` and ``b`` equal, floats bit for bit (NaN equals NaN), dicts key by key."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_bits(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return (a != a and b != b) or a.hex() == b.hex()
    return a == b


def tenant_mix(tenants: int, replicas: int, spec: int, seed: int) -> tuple[ClusterConfig, list[Request]]:
    """A speculating tenant mix (acceptance 0.6 / 1.0 / 0.0, tenant 1 high priority) on ``replicas``
    replicas with a tight KV budget, and 6 s of Poisson arrivals at 14 req/s per replica."""
    ts = tuple(TenantSpec(name=f"t{i}", priority=int(i == 1), spec_acceptance=(0.6, 1.0, 0.0)[i])
               for i in range(tenants))
    cfg = ClusterConfig(replica=ReplicaConfig(kv_budget_fraction=0.1, speculation_depth=spec, batch_cap=32),
                        num_replicas=replicas, tenants=ts, priority_routing=tenants > 1)
    reqs = poisson_requests(np.random.default_rng(seed), rate=14.0 * replicas, duration_s=6.0,
                            output=(1, 300), tenants=tenants)
    return cfg, reqs
