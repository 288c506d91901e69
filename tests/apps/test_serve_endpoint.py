"""The Ray Serve endpoint over real HTTP on 127.0.0.1: actions equal the in-process module's,
bad bodies get 422, batching under concurrency keeps every answer right."""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.ray

TASK = "bursty_workload"


def _env_spaces():
    """The real single-agent env's spaces (flat MultiDiscrete action wrapper), as training sees them."""
    from inferencegym.rl.env_creators import make_single_env

    env = make_single_env({"task_id": TASK})
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    import ray
    from ray import serve
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from inferencegym.rl.modules import MLPModule
    from inferencegym.apps.policy_endpoint.app import run_server

    obs_space, act_space = _env_spaces()
    torch.manual_seed(0)
    module = RLModuleSpec(module_class=MLPModule, observation_space=obs_space, action_space=act_space,
                          model_config={"hidden": [32, 32]}).build()
    ckpt = tmp_path_factory.mktemp("serve") / "module"
    module.save_to_path(ckpt)
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    port = _free_port()
    run_server(f"checkpoint:{ckpt}", task_id=TASK, port=port, max_batch_size=16)
    try:
        yield f"http://127.0.0.1:{port}", module, ckpt
    finally:
        serve.shutdown()
        if started:
            ray.shutdown()


def _in_process_greedy(module, obs: np.ndarray) -> np.ndarray:
    from ray.rllib.core.columns import Columns

    with torch.no_grad():
        out = module.forward_inference({Columns.OBS: torch.from_numpy(obs)})
        dist = module.get_inference_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
        return dist.to_deterministic().sample().numpy()


def _observations(n: int) -> np.ndarray:
    """Real env observations (a random-action rollout) plus scaled noise: varied inputs."""
    from inferencegym.rl.env_creators import make_single_env

    env = make_single_env({"task_id": TASK, "episode_windows": n})
    obs, _ = env.reset(seed=5)
    out = [obs]
    while len(out) < n:
        obs, _, term, trunc, _ = env.step(env.action_space.sample())
        out.append(obs)
        if term or trunc:
            obs, _ = env.reset()
    rng = np.random.default_rng(0)
    real = np.stack(out).astype(np.float32)
    return np.concatenate([real, np.abs(rng.normal(scale=3.0, size=real.shape)).astype(np.float32)])


def test_actions_match_in_process_module(endpoint):
    from inferencegym.envs.actions import flat_to_action
    from inferencegym.apps.policy_endpoint.client import HTTPPolicy

    url, module, _ = endpoint
    policy = HTTPPolicy(url, task_id=TASK)
    obs = _observations(12)
    expected = _in_process_greedy(module, obs)
    single = np.stack([policy.act_flat(o) for o in obs])
    batched = np.asarray(_raw_batch(url, obs))
    assert np.array_equal(single, expected)
    assert np.array_equal(batched, expected)
    assert len(set(map(tuple, expected))) > 1  # the check is not vacuous: actions vary with obs
    # the policy API returns what the in-process ModulePolicy returns: a ServeAction
    assert [policy.act(o) for o in obs[:4]] == [flat_to_action(a) for a in expected[:4]]
    assert policy.act_batch(list(obs[:4])) == [flat_to_action(a) for a in expected[:4]]
    # concurrent single requests are batched by @serve.batch and still answer each request correctly
    with ThreadPoolExecutor(8) as pool:
        conc = np.stack(list(pool.map(policy.act_flat, obs)))
    assert np.array_equal(conc, expected)
    policy.close()


def _raw_batch(url: str, obs: np.ndarray) -> list:
    import httpx

    r = httpx.post(f"{url}/act", json={"observations": obs.tolist()})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"actions", "policy_version"}
    return body["actions"]


def test_closed_loop_evaluate_grades_like_in_process(endpoint):
    """`inferencegym evaluate --policy http://...` scores the served policy exactly like the
    in-process checkpoint: same grades, same rewards, same seeds."""
    import json

    from typer.testing import CliRunner

    from inferencegym.cli import app

    url, _, ckpt = endpoint
    res = CliRunner().invoke(app, ["evaluate", "--policy", f"checkpoint:{ckpt}", "--policy", url,
                                   "--task", TASK, "--episodes", "2", "--episode-windows", "24",
                                   "--seed", "1000", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout[res.stdout.index("["):])
    local, served = rows
    assert local["policy"].startswith("checkpoint:") and served["policy"] == url
    assert served["seeds"] == local["seeds"] == [1000, 1001]
    assert served["scores"] == local["scores"]
    assert served["reward_mean"] == local["reward_mean"]
    assert served["ttft_p99_s"] == local["ttft_p99_s"]


def test_healthz_and_metadata(endpoint):
    import httpx

    from inferencegym.apps.policy_endpoint.policy import checkpoint_version

    url, _, ckpt = endpoint
    health = httpx.get(f"{url}/healthz").json()
    assert health == {"status": "ok", "policy_version": checkpoint_version(ckpt)}
    meta = httpx.get(f"{url}/metadata").json()
    obs_space, act_space = _env_spaces()
    assert meta["task_id"] == TASK
    assert meta["checkpoint"] == str(ckpt)
    assert meta["observation_space"]["shape"] == list(obs_space.shape)
    assert meta["action_space"] == {"type": "MultiDiscrete", "nvec": act_space.nvec.tolist()}
    assert meta["max_batch_size"] == 16


# Bodies and the expected reason, as functions of the observation length d.
BAD_BODIES = {
    "empty": lambda d: ({}, "exactly one"),
    "both": lambda d: ({"observation": [0.0] * d, "observations": [[0.0] * d]}, "exactly one"),
    "extra_key": lambda d: ({"obs": [0.0] * d}, "Extra inputs"),
    "short": lambda d: ({"observation": [0.0] * 3}, f"observation: expected shape ({d},), got (3,)"),
    "short_in_batch": lambda d: ({"observations": [[0.0] * d, [0.0] * 9]},
                                 f"observations[1]: expected shape ({d},), got (9,)"),
    "not_numbers": lambda d: ({"observation": "abc"}, "expected numbers"),
    # issue 25: strict numbers only (numpy would read "0.5" as 0.5)
    "numeric_strings": lambda d: ({"observation": ["0.5"] * d}, "not numeric strings"),
    "numeric_string_in_batch": lambda d: ({"observations": [[0.5] * d, [0.5] * (d - 1) + ["1e-3"]]},
                                          "observations[1]: expected numbers, got a string"),
    "null_in_observation": lambda d: ({"observation": [None] * d}, "expected numbers, got null"),
    "empty_batch": lambda d: ({"observations": []}, "empty"),
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_bad_body_gets_422_with_reason(endpoint, case):
    import httpx

    url, _, _ = endpoint
    (D,) = _env_spaces()[0].shape
    body, needle = BAD_BODIES[case](D)
    r = httpx.post(f"{url}/act", json=body)
    assert r.status_code == 422, r.text
    assert needle in r.text
    r = httpx.post(f"{url}/act", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422
    # the endpoint still serves after bad requests
    assert httpx.post(f"{url}/act", json={"observation": [0.0] * D}).status_code == 200


def test_wrong_task_is_refused(endpoint):
    from inferencegym.apps.policy_endpoint.client import HTTPPolicy

    with pytest.raises(ValueError, match="serves a policy for task 'bursty_workload', not 'static_workload'"):
        HTTPPolicy(endpoint[0], task_id="static_workload")
    # through the policy registry, as `inferencegym evaluate` builds it
    from inferencegym.policies import get_policy

    assert isinstance(get_policy(endpoint[0], TASK), HTTPPolicy)


# -- issue 17: non-finite numbers, huge integers, float32 overflow, oversized bodies, metrics --------
def test_non_finite_huge_and_oversized_inputs_are_refused_cleanly(endpoint):
    import httpx

    url, _, _ = endpoint
    (D,) = _env_spaces()[0].shape
    rest = ", ".join(["0.5"] * (D - 1))
    bodies = {
        "nan": f'{{"observation": [NaN, {rest}]}}',
        "inf": f'{{"observation": [Infinity, {rest}]}}',
        "huge_int": f'{{"observation": [{"9" * 401}, {rest}]}}',
        "float32_overflow": f'{{"observation": [1e39, {rest}]}}',
        "nan_in_extra_field": '{"observation": [0.0], "x": NaN}',
        # issue 25: lone surrogates and deep nesting are a 4xx with one line, never a 500
        "lone_surrogate": '{"observation": "\\ud800"}',
        "lone_surrogate_key": '{"\\udc00": [0.5]}',
        "lone_surrogate_in_batch": f'{{"observations": [[{rest}, "\\ud800"]]}}',
        "deep_nesting": '{"observation": ' + "[" * 3000 + "]" * 3000 + "}",
        "huge_int_extra_field": '{"observations": [[0.0]], "y": ' + "9" * 401 + "}",
    }
    with httpx.Client(timeout=60) as c:
        for name, body in bodies.items():
            r = c.post(f"{url}/act", content=body.encode(), headers={"content-type": "application/json"})
            assert r.status_code == 422, (name, r.status_code, r.text[:300])
            assert len(r.content) < 2000, name  # never echoes the input back whole
        for name in ("lone_surrogate", "lone_surrogate_key", "lone_surrogate_in_batch", "deep_nesting"):
            r = c.post(f"{url}/act", content=bodies[name].encode(), headers={"content-type": "application/json"})
            assert ("surrogate" if "surrogate" in name else "nests") in r.json()["detail"]["error"], name
        assert "overflows float32" in c.post(f"{url}/act", content=bodies["float32_overflow"].encode(),
                                             headers={"content-type": "application/json"}).text
        big = b'{"observations": [' + b",".join([b"[" + b"0.5," * (D - 1) + b"0.5]"] * 50000) + b"]}"
        assert len(big) > 4_000_000
        r = c.post(f"{url}/act", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and len(r.content) < 2000
        # a lying (chunked, no Content-Length) upload is counted as it streams
        r = c.post(f"{url}/act", content=iter([big[i:i + 65536] for i in range(0, len(big), 65536)]),
                   headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert c.post(f"{url}/act", json={"observation": [0.0] * D}).status_code == 200
        m = c.get(f"{url}/metrics")
        assert m.status_code == 200 and "inferencegym_serve_http_requests_total" in m.text
        # DNS-rebinding guard: only loopback host names by default
        assert c.get(f"{url}/healthz", headers={"host": "evil.example"}).status_code == 400
        assert c.get(f"{url}/healthz", headers={"host": "localhost"}).status_code == 200


def test_schema_fuzz_of_the_serve_endpoint_never_5xx(endpoint):
    """schemathesis over the endpoint's own OpenAPI schema, plus one leaf of each generated body
    replaced by NaN, +-Infinity, 1e400, a 401-digit integer or 1e39: never a 5xx."""
    import copy
    import json

    import httpx
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    url = endpoint[0]
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    ops = [r.ok() for r in schema.get_all_operations()]
    assert "POST /act" in {f"{op.method.upper()} {op.path}" for op in ops}
    lits = ("NaN", "Infinity", "-Infinity", "1e400", "9" * 401, "1e39", '"\\ud800"', '"0.5"',
            "[" * 2000 + "]" * 2000)
    with httpx.Client(base_url=url, timeout=60) as c:
        for op in ops:
            @settings(max_examples=20, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
            @given(case=op.as_strategy(), lit=st.sampled_from(lits))
            def check(case, lit):
                r = case.call(base_url=url, timeout=60)
                assert r.status_code < 500, f"{case.method} {case.formatted_path}: {r.status_code} {r.text[:300]}"
                if case.method.upper() == "POST":
                    body = copy.deepcopy(case.body) if isinstance(case.body, dict) else {"observation": 0}
                    key = next(iter(body), "observation")
                    body[key] = [0.5, "__LIT__"] if key in ("observation", "observations") else "__LIT__"
                    text = json.dumps(body).replace('"__LIT__"', lit)
                    r = c.post(case.formatted_path, content=text.encode(),
                               headers={"content-type": "application/json"})
                    assert r.status_code < 500, f"{text[:200]} -> {r.status_code}: {r.text[:300]}"

            check()


def _listening_sockets(pid: int) -> list[str]:
    """Local addresses (hex, as in /proc/net/tcp*) of the TCP sockets ``pid`` listens on."""
    import os
    import re

    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            m = re.match(r"socket:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
        if m:
            inodes.add(m.group(1))
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A = LISTEN
                    out.append(cols[1].split(":")[0])
    return out


def test_the_serve_replica_listens_on_loopback_only(endpoint):
    """Issue 25: Ray Serve starts each replica's gRPC server on [::] (every interface); the
    deployment rebinds it to the node IP, 127.0.0.1 on this loopback-only Ray."""
    import os
    import sys

    import ray

    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc (Linux)")
    node = ray._private.worker._global_node
    raylet = getattr(node, "all_processes", {}).get("raylet")
    raylet_pid = raylet[0].process.pid if raylet else None
    replicas = [int(p) for p in filter(str.isdigit, os.listdir("/proc"))
                if _cmd(p).startswith("ray::ServeReplica:inferencegym-policy")
                and (raylet_pid is None or _ppid(p) == raylet_pid)]
    assert replicas, "no Serve replica process found"
    any_v4, any_v6 = "00000000", "00000000000000000000000000000000"
    for pid in replicas:
        addrs = _listening_sockets(pid)
        assert addrs, pid
        assert any_v4 not in addrs and any_v6 not in addrs, (pid, addrs)


def _cmd(pid: str) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
    except OSError:
        return ""


def _ppid(pid: str) -> int | None:
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
