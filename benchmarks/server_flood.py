"""The flood abusers of ``benchmarks/server_load.py --scenario flood`` (issue 25).

One client (127.0.0.2) floods the routes that run whole episodes (``/baseline`` with a new seed
each call, every row, from 44 connections; ``/grader`` replays from 4) back to back, ignoring
``Retry-After``; or it floods WebSocket sessions: opens sockets as fast as it is answered, resets
each one it is given, and sends ``[]`` and a 1.2 MB frame on each. Meanwhile the honest clients
of ``server_load.py`` run their sessions over HTTP, and another client (127.0.0.3) tries to open a
WebSocket session of its own. Run through ``server_load.py``; not on its own.
"""

from __future__ import annotations

import collections
import itertools
import json
import multiprocessing
import socket
import statistics
import threading
import time

import httpx
from websockets.sync.client import connect

TASK = "bursty_workload"
ACTION = {"batch_cap": 64, "kv_budget_fraction": 0.85}
FLOOD_CONNECTIONS = 48
GRADER_CONNECTIONS = 4
"""Of the flood's connections, these replay ``/grader`` episodes; the others ask ``/baseline`` (the
issue's scenario: 48 parallel ``/baseline`` calls with new seeds took all 40 worker threads)."""
FLOOD_WARMUP_S = 3.0
"""The honest clients start this long after the abuser began (the flood is in full swing)."""


def _client(url: str, source: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=300, transport=httpx.HTTPTransport(local_address=source))


def episode_flood(url: str, max_requests: int, stop: threading.Event, codes: collections.Counter) -> None:
    """48 connections, back to back: ``/baseline`` (all rows, new seed) and ``/grader`` replays."""
    sent = itertools.count()

    def worker(k: int) -> None:
        with _client(url, "127.0.0.2") as c:
            while not stop.is_set():
                n = next(sent)
                if n >= max_requests:
                    return
                try:
                    if k < FLOOD_CONNECTIONS - GRADER_CONNECTIONS:
                        r = c.get("/baseline", params={"seed": 50_000 + n})
                    else:
                        r = c.post("/grader", json={"task_id": TASK, "seed": 50_000 + n, "actions": [ACTION] * 40})
                    codes[r.status_code] += 1
                except httpx.HTTPError as exc:
                    codes[type(exc).__name__] += 1

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(FLOOD_CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _ws(url: str, source: str):
    port = int(url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), source_address=(source, 0), timeout=60)
    return connect(url.replace("http", "ws") + "/ws", sock=sock, max_size=None, open_timeout=60)


def ws_flood(url: str, max_requests: int, stop: threading.Event, codes: collections.Counter) -> None:
    """Open WebSocket sessions as fast as answered; keep each one given, reset it, abuse it."""
    held = []
    big = json.dumps({"type": "reset", "data": {"episode_id": "x" * 1_200_000}})
    try:
        for _ in range(max_requests):
            if stop.is_set():
                break
            try:
                ws = _ws(url, "127.0.0.2")
                ws.send(json.dumps({"type": "reset", "data": {"seed": len(held), "task_id": TASK}}))
                first = json.loads(ws.recv(timeout=60))
            except Exception as exc:  # refused at the transport, timed out
                codes[f"ws {type(exc).__name__}"] += 1
                continue
            if first.get("type") != "observation":
                codes[f"ws refused {first.get('data', {}).get('code')}"] += 1
                ws.close()
                continue
            codes["ws session held"] += 1
            held.append(ws)
            for frame in ("[]", big):
                try:
                    ws.send(frame)
                    reply = json.loads(ws.recv(timeout=60))
                    codes[f"ws frame -> {reply.get('type')}"] += 1
                except Exception as exc:  # the server ended the session (before issue 25)
                    codes[f"ws frame -> {type(exc).__name__}"] += 1
                    break
        while not stop.is_set():
            time.sleep(0.1)
    finally:
        for ws in held:
            try:
                ws.close()
            except Exception:
                pass


def honest_ws_probe(url: str, out: dict, stop: threading.Event) -> None:
    """Another client opens a WebSocket session while the flood runs: can it, and how fast?"""
    time.sleep(3.0)
    t0 = time.perf_counter()
    try:
        with _ws(url, "127.0.0.3") as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 1, "task_id": TASK}}))
            reply = json.loads(ws.recv(timeout=120))
            out["honest_ws_session"] = reply.get("type") == "observation"
            out["honest_ws_reset_s"] = round(time.perf_counter() - t0, 3)
    except Exception as exc:
        out["honest_ws_session"] = False
        out["honest_ws_error"] = type(exc).__name__


def _child(name: str, url: str, max_requests: int, stop, ready, out) -> None:
    codes: collections.Counter = collections.Counter()
    ready.set()
    local_stop = threading.Event()
    threading.Thread(target=lambda: (stop.wait(), local_stop.set()), daemon=True).start()
    {"episode_flood": episode_flood, "ws_flood": ws_flood}[name](url, max_requests, local_stop, codes)
    out.put(dict(codes))


def in_own_process(name: str):
    """The abuser ``name`` run in a process of its own (its 48 threads would otherwise share the
    honest clients' GIL and slow them down on the client side, not on the server)."""

    def run(url: str, max_requests: int, stop: threading.Event, codes: collections.Counter) -> None:
        ctx = multiprocessing.get_context("spawn")
        mp_stop, mp_ready, out = ctx.Event(), ctx.Event(), ctx.Queue()
        proc = ctx.Process(target=_child, args=(name, url, max_requests, mp_stop, mp_ready, out))
        proc.start()
        mp_ready.wait(120)
        time.sleep(FLOOD_WARMUP_S)
        run.ready.set()
        stop.wait()
        mp_stop.set()
        try:
            codes.update(out.get(timeout=120))
        except Exception as exc:  # the abuser process failed: say so instead of hanging
            codes[f"abuser failed: {type(exc).__name__}"] += 1
        finally:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.terminate()

    run.ready = threading.Event()  # set once the flood is in full swing
    return run


def run_flood_phases(url: str, pid: int, clients: int, steps: int, max_requests: int, run_phase, rss_mb) -> dict:
    out: dict = {}
    out["unloaded"] = run_phase(url, clients, steps, None)
    out["baseline_flood"] = run_phase(url, clients, steps, max_requests, abuser=in_own_process("episode_flood"))
    out["rss_mb_after_baseline_flood"] = rss_mb(pid)
    probe: dict = {}
    stop = threading.Event()
    prober = threading.Thread(target=honest_ws_probe, args=(url, probe, stop))
    prober.start()
    out["ws_flood"] = run_phase(url, clients, steps, max_requests, abuser=in_own_process("ws_flood"))
    prober.join(timeout=180)
    out["ws_flood"].update(probe)
    out["rss_mb_after_ws_flood"] = rss_mb(pid)
    out["unloaded_again"] = run_phase(url, clients, steps, None)
    base = statistics.median([out["unloaded"]["p99_ms"], out["unloaded_again"]["p99_ms"]])
    out["unloaded_p99_ms_median"] = base
    fivexx = 0
    for phase in ("unloaded", "baseline_flood", "ws_flood", "unloaded_again"):
        ph = out[phase]
        ph["p99_ratio"] = ph["p99_ms"] / base
        bad = sum(v for k, v in ph["abuser_codes"].items() if k.isdigit() and int(k) >= 500)
        bad += sum(1 for e in ph["errors"] if e.split()[-1].isdigit() and int(e.split()[-1]) >= 500)
        ph["responses_ge_500"] = bad
        fivexx += bad
    out["responses_ge_500"] = fivexx
    out["server_alive"] = httpx.get(f"{url}/health", timeout=10).status_code == 200
    return out


def flood_report(out: dict) -> str:
    lines = ["| phase | honest steps | honest errors | p50 step ms | p99 step ms | p99 / unloaded | >= 500 |",
             "|---|---|---|---|---|---|---|"]
    names = {"unloaded": "32 honest sessions alone", "baseline_flood": "+ /baseline & /grader flood",
             "ws_flood": "+ WebSocket session flood", "unloaded_again": "alone again"}
    for key, name in names.items():
        ph = out[key]
        lines.append(f"| {name} | {ph['honest_steps']} | {ph['honest_errors']} | {ph['p50_ms']:.1f} | "
                     f"{ph['p99_ms']:.1f} | {ph['p99_ratio']:.2f} | {ph['responses_ge_500']} |")
    ws = out["ws_flood"]
    lines.append("")
    lines.append(f"abuser's answers, episode flood: {out['baseline_flood']['abuser_codes']}")
    lines.append(f"abuser's answers, WebSocket flood: {ws['abuser_codes']}")
    lines.append(f"another client's WebSocket session during the flood: {ws.get('honest_ws_session')} "
                 f"(reset in {ws.get('honest_ws_reset_s')} s); responses >= 500 in all: {out['responses_ge_500']}; "
                 f"server alive: {out['server_alive']}")
    return "\n".join(lines)


__all__ = ["episode_flood", "ws_flood", "run_flood_phases", "flood_report"]
