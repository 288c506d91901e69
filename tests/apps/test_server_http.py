"""The OpenEnv HTTP server through real HTTP (uvicorn on 127.0.0.1), never by calling route functions."""

from __future__ import annotations

import json
import threading
import time

import gymnasium
import httpx
import pytest

import inferencegym.envs  # noqa: F401  (registers the env)
from fakes.live import live_server
from inferencegym.envs import ServeAction, get_task, grade
from inferencegym.apps.env_server.app import build_app
from inferencegym.apps.env_server.client import InferenceGymClient, InferenceGymEnv, InferenceGymHTTPError

TASKS = ("static_workload", "bursty_workload", "adversarial_multitenant")

# A fixed, varied action schedule (changes every few windows so switches and their costs happen).
SCHEDULE = [
    ServeAction(batch_cap=64, kv_budget_fraction=0.85),
    ServeAction(batch_cap=8, kv_budget_fraction=0.3),
    ServeAction(batch_cap=256, speculation_depth=2, quantization_tier="INT8"),
    ServeAction(batch_cap=128, prefill_decode_split=True, priority_routing=True),
]


def action_at(i: int) -> ServeAction:
    return SCHEDULE[(i // 7) % len(SCHEDULE)]


def in_process_episode(task_id: str, seed: int, steps: int | None = None):
    """Rewards, observations and grade of the same schedule run in process (gymnasium.make)."""
    env = gymnasium.make("InferenceGym/LLMServe-v0", task_id=task_id)
    obs, _ = env.reset(seed=seed)
    rewards, observations = [], [[float(x) for x in obs]]
    done, i = False, 0
    while not done and (steps is None or i < steps):
        obs, r, term, trunc, _ = env.step(action_at(i))
        rewards.append(float(r))
        observations.append([float(x) for x in obs])
        done, i = term or trunc, i + 1
    score = float(grade(task_id, env.unwrapped.episode_log()))
    env.close()
    return rewards, observations, score


@pytest.fixture(scope="module")
def server_url():
    # episodes on the pool's own thread (fast on a busy machine); the worker process is tested below
    with live_server(build_app(max_sessions=16, max_sessions_per_client=16, idle_timeout_s=600,
                               episode_processes=False)) as url:
        yield url


@pytest.fixture()
def http(server_url):
    with httpx.Client(base_url=server_url, timeout=60) as c:
        yield c


def _step(http, sid, action):
    r = http.post("/step", json={"session_id": sid, "action": action.model_dump()})
    assert r.status_code == 200, r.text
    return r.json()


# ---------------------------------------------------------------------------------------------
def test_full_episode_over_http_grades_like_in_process(http):
    task_id, seed = "bursty_workload", 11
    r = http.post("/reset", json={"task_id": task_id, "seed": seed})
    assert r.status_code == 200, r.text
    body = r.json()
    sid = body["session_id"]  # top level, as scripts outside the project expect
    assert body["done"] is False and body["reward"] is None
    features = [body["observation"]["features"]]
    rewards, i = [], 0
    while not body["done"]:
        body = _step(http, sid, action_at(i))
        assert body["session_id"] == sid
        rewards.append(body["reward"])
        features.append(body["observation"]["features"])
        i += 1
    ref_rewards, ref_obs, ref_score = in_process_episode(task_id, seed)
    assert len(rewards) == get_task(task_id).episode_windows == len(ref_rewards)
    assert rewards == ref_rewards  # bit-identical through JSON
    assert features == ref_obs
    final = body["observation"]
    assert final["grade"] == ref_score
    g = http.post("/grader", json={"session_id": sid}).json()
    assert g["score"] == ref_score and g["done"] is True and g["steps"] == len(rewards)
    assert 0.0 <= g["score"] <= 1.0
    st = http.get("/state", params={"session_id": sid}).json()
    assert st["step_count"] == len(rewards) and st["done"] is True and st["seed"] == seed
    # after the end: a clear 409, and the state is unchanged
    r = http.post("/step", json={"session_id": sid, "action": {}})
    assert r.status_code == 409 and "reset" in r.json()["detail"]["error"]
    assert http.get("/state", params={"session_id": sid}).json()["step_count"] == len(rewards)
    # the oracle (hidden phase) never reaches the agent
    assert not any(k.startswith("oracle") for k in final["raw"])
    assert set(final["reward_components"]) >= {"throughput", "slo", "kv_band", "cost"}


def test_two_concurrent_sessions_stay_isolated(server_url):
    jobs = {"a": ("adversarial_multitenant", 3), "b": ("static_workload", 4)}
    steps = 40
    results: dict[str, list[float]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run(name: str) -> None:
        task_id, seed = jobs[name]
        try:
            with httpx.Client(base_url=server_url, timeout=60) as c:
                sid = c.post("/reset", json={"task_id": task_id, "seed": seed}).json()["session_id"]
                barrier.wait(timeout=30)
                out = []
                for i in range(steps):
                    out.append(_step(c, sid, action_at(i))["reward"])
                st = c.get("/state", params={"session_id": sid}).json()
                assert (st["task_id"], st["seed"], st["step_count"]) == (task_id, seed, steps)
                results[name] = out
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for name, (task_id, seed) in jobs.items():
        ref, _, _ = in_process_episode(task_id, seed, steps=steps)
        assert results[name] == ref, f"session {name} was disturbed by the other one"


def test_reset_with_empty_body_and_no_body(http):
    r = http.post("/reset", json={})
    assert r.status_code == 200, r.text
    sid = r.json()["session_id"]
    st = http.get("/state", params={"session_id": sid}).json()
    assert st["task_id"] == "static_workload" and isinstance(st["seed"], int) and st["step_count"] == 0
    r2 = http.post("/reset")  # no body at all
    assert r2.status_code == 200 and r2.json()["session_id"] != sid
    # reset in an existing session keeps its id and starts over
    _step(http, sid, action_at(0))
    r3 = http.post("/reset", json={"session_id": sid, "seed": 5, "task_id": "bursty_workload"})
    assert r3.json()["session_id"] == sid
    st = http.get("/state", params={"session_id": sid}).json()
    assert (st["task_id"], st["seed"], st["step_count"]) == ("bursty_workload", 5, 0)


@pytest.mark.parametrize("path,body,needle", [
    ("/step", {"session_id": "x", "action": {"batch_cap": 0}}, "batch_cap"),
    ("/step", {"session_id": "x", "action": {"batch_cap": 600}}, "batch_cap"),
    ("/step", {"session_id": "x", "action": {"kv_budget_fraction": 0.01}}, "kv_budget_fraction"),
    ("/step", {"session_id": "x", "action": {"quantization_tier": "FP8"}}, "quantization_tier"),
    ("/step", {"session_id": "x", "action": {"batch_size": 4}}, "batch_size"),
    ("/step", {"action": {}}, "session_id"),
    ("/step", {"session_id": "x"}, "action"),
    ("/reset", {"seed": -1}, "seed"),
    ("/reset", {"seed": "abc"}, "seed"),
    ("/reset", {"task_id": "no_such_task"}, "static_workload"),
    ("/reset", {"tsak_id": "static_workload"}, "tsak_id"),
    ("/grader", {"task_id": "static_workload", "episode_log": {"windows": "x"}}, "seed and actions"),
    ("/grader", {"task_id": "static_workload", "seed": 0, "actions": [{"batch_cap": "64"}]}, "batch_cap"),
])
def test_schema_violations_get_422_with_the_reason(http, path, body, needle):
    r = http.post(path, json=body)
    assert r.status_code == 422, r.text
    assert needle in r.text


def test_malformed_json_and_missing_query_get_422(http):
    r = http.post("/step", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    r = http.get("/state")
    assert r.status_code == 422 and "session_id" in r.text


def test_unknown_session_is_404_and_invalid_action_leaves_state(http):
    r = http.post("/step", json={"session_id": "nope", "action": {}})
    assert r.status_code == 404 and "POST /reset" in r.json()["detail"]["error"]
    assert http.get("/state", params={"session_id": "nope"}).status_code == 404
    sid = http.post("/reset", json={"seed": 1}).json()["session_id"]
    _step(http, sid, action_at(0))
    assert http.post("/step", json={"session_id": sid, "action": {"batch_cap": -3}}).status_code == 422
    assert http.get("/state", params={"session_id": sid}).json()["step_count"] == 1
    assert http.delete(f"/sessions/{sid}").status_code == 200
    assert http.get("/state", params={"session_id": sid}).status_code == 404


def test_grader_replays_submitted_actions_and_refuses_posted_logs(http):
    env = gymnasium.make("InferenceGym/LLMServe-v0", task_id="static_workload")
    env.reset(seed=2)
    for i in range(30):
        env.step(action_at(i))
    log = env.unwrapped.episode_log()
    expected = float(grade("static_workload", log))
    actions = [action_at(i).model_dump() for i in range(30)]
    r = http.post("/grader", json={"task_id": "static_workload", "seed": 2, "actions": actions})
    assert r.status_code == 200, r.text
    assert r.json()["score"] == expected and r.json()["verified_by"] == "replay"
    assert r.json()["done"] is False and r.json()["steps"] == 30
    # a client-written log is never graded, however plausible
    r = http.post("/grader", json={"task_id": "static_workload", "episode_log": log.model_dump(mode="json")})
    assert r.status_code == 422 and "replays" in r.text


def test_tasks_and_openenv_standard_endpoints(http):
    t = http.get("/tasks").json()
    assert [x["task_id"] for x in t["tasks"]] == list(TASKS)
    assert set(t["action_schema"]["properties"]) == set(ServeAction.model_fields)
    assert "heuristic" in t["policies"] and "llm" not in t["policies"]
    assert http.get("/health").json()["status"] == "healthy"
    md = http.get("/metadata").json()
    assert md["name"] == "InferenceGym" and "control window" in md["description"]
    schema = http.get("/schema").json()
    assert "batch_cap" in schema["action"]["properties"]
    assert "seed" in schema["state"]["properties"]  # state_cls passed: real fields published
    # OpenEnv Task API backed by the registry
    assert http.post("/inferencegym/num_tasks", json={"split": "test"}).json() == {"num_tasks": 3}
    task = http.post("/inferencegym/task", json={"split": "test", "index": 2}).json()["task"]
    assert task["id"] == "adversarial_multitenant"
    assert http.post("/inferencegym/task", json={"split": "test", "index": 9}).status_code == 400
    # only our session-backed routes answer /reset, /step, /state (the SDK's are removed)
    spec = http.get("/openapi.json").json()
    assert "StepBody" in json.dumps(spec["paths"]["/step"])
    assert "session_id" in spec["components"]["schemas"]["StepBody"]["properties"]
    assert any(p["name"] == "session_id" for p in spec["paths"]["/state"]["get"]["parameters"])


def test_baseline_is_deterministic_and_matches_in_process(http):
    from inferencegym.policies import get_policy

    params = {"policy": "static_default", "task_id": "static_workload", "seed": 3}
    a = http.get("/baseline", params=params)
    assert a.status_code == 200, a.text
    row = a.json()["results"][0]
    env = gymnasium.make("InferenceGym/LLMServe-v0", task_id="static_workload")
    obs, info = env.reset(seed=3)
    pol = get_policy("static_default", "static_workload")
    if hasattr(pol, "reset"):
        pol.reset(seed=3)
    done = False
    while not done:
        obs, r, term, trunc, info = env.step(pol.act(obs, info))
        done = term or trunc
    assert row["scores"] == [float(env.unwrapped.grade())]
    assert http.get("/baseline", params=params).json() == a.json()
    # the default: every deterministic baseline on every task (a baseline that cannot be built,
    # e.g. best_static before its search was shipped, is reported, never a 500)
    rows = http.get("/baseline").json()["results"]
    assert {(r["policy"], r["task_id"]) for r in rows} == {
        (p, t) for p in ("static_default", "heuristic", "best_static") for t in TASKS}
    for r in rows:
        assert (r["scores"] is not None and 0 <= r["score_mean"] <= 1) or r["error"]
    bad = http.get("/baseline", params={"policy": "nope"})
    assert bad.status_code == 422 and "heuristic" in bad.text


def test_baseline_and_replay_in_the_worker_process_match_in_process():
    """The production path: episodes in the spawned, niced worker process give the same rows and
    replay grades as in process (generous timeouts: at nice 19 the worker yields to everything)."""
    actions = [{"batch_cap": 32 * (1 + i % 4), "kv_budget_fraction": 0.8} for i in range(6)]
    params = {"policy": "static_default", "task_id": "static_workload", "seed": 3}
    with live_server(build_app(max_sessions=4)) as url, httpx.Client(base_url=url, timeout=600) as c:
        row = c.get("/baseline", params=params).json()["results"][0]
        graded = c.post("/grader", json={"task_id": "bursty_workload", "seed": 9, "actions": actions}).json()
    from inferencegym.apps.env_server.episodes import baseline_row, replay_summary

    assert row == baseline_row("static_default", "static_workload", 3, 1)
    expected = replay_summary("bursty_workload", 9, actions)
    assert graded["score"] == expected["score"] and graded["steps"] == expected["steps"] == 6


def test_suggest_returns_a_valid_baseline_action(http):
    sid = http.post("/reset", json={"seed": 1, "task_id": "bursty_workload"}).json()["session_id"]
    r = http.post("/suggest", json={"session_id": sid, "policy": "heuristic"})
    assert r.status_code == 200, r.text
    ServeAction(**r.json()["action"])
    assert http.post("/suggest", json={"session_id": sid, "policy": "llm"}).status_code == 422


def test_python_http_client(server_url):
    ref, _, ref_score = in_process_episode("static_workload", 9, steps=None)
    with InferenceGymClient(server_url) as env:
        res = env.reset(task_id="static_workload", seed=9)
        assert env.session_id and res.observation.task_id == "static_workload"
        rewards, i = [], 0
        while not res.done:
            res = env.step(action_at(i))
            rewards.append(res.reward)
            i += 1
        assert rewards == ref
        assert env.state().step_count == len(ref)
        assert env.grade()["score"] == ref_score == res.observation.grade
        with pytest.raises(InferenceGymHTTPError) as ei:
            env.step({"batch_cap": 0})
        assert ei.value.status == 422


def test_openenv_websocket_client(server_url):
    ref, _, _ = in_process_episode("adversarial_multitenant", 5, steps=6)
    with InferenceGymEnv(base_url=server_url) as env:
        r = env.reset(seed=5, task_id="adversarial_multitenant")
        assert r.observation.task_id == "adversarial_multitenant"
        rewards = [env.step(action_at(i)).reward for i in range(6)]
        st = env.state()
    assert rewards == ref
    assert st.step_count == 6 and st.seed == 5


def test_session_limit_and_idle_expiry():
    # idle timeout long enough that the requests below fit in it on a loaded machine; expiry is then
    # awaited by polling (no fixed sleep that assumes an idle machine)
    with live_server(build_app(max_sessions=2, max_sessions_per_client=2, idle_timeout_s=8.0)) as url, \
            httpx.Client(base_url=url, timeout=30) as c:
        s1 = c.post("/reset", json={}).json()["session_id"]
        c.post("/reset", json={})
        full = c.post("/reset", json={})
        assert full.status_code == 429
        assert "session limit" in full.json()["detail"]["error"] and "expire" in full.json()["detail"]["error"]
        # a client can still reuse its own session when the server is full
        assert c.post("/reset", json={"session_id": s1}).status_code == 200
        deadline = time.monotonic() + 120
        while c.get("/sessions").json()["active"]:  # (/state would count as use) until both expire
            assert time.monotonic() < deadline, "the idle sessions never expired"
            time.sleep(0.5)
        assert c.get("/state", params={"session_id": s1}).status_code == 404  # expired
        assert c.post("/reset", json={}).status_code == 200  # room again
        assert c.get("/sessions").json()["active"] == 1
