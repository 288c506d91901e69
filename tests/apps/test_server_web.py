"""The /web page in headless Chromium: it loads, drives real HTTP steps, and renders.

Needs Debian's ``chromium`` (``apt-get install -y chromium``); under CI its absence fails the test.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from fakes.live import live_server
from inferencegym.apps.env_server.app import build_app

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
    "--disable-dev-shm-usage", "--virtual-time-budget=30000", "--window-size=1280,1000",
]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    msg = "headless Chromium not found: install it with `apt-get install -y chromium`"
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


def _run(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    profile = tmp / f"profile-{len(list(tmp.iterdir()))}"
    return subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=300)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_web_page_runs_steps_in_headless_chromium(tmp_path):
    app = build_app(max_sessions=8, max_sessions_per_client=8)
    steps_seen: list[str] = []

    @app.middleware("http")
    async def record(request, call_next):  # count the page's real API calls
        steps_seen.append(f"{request.method} {request.url.path}")
        return await call_next(request)

    with live_server(app) as url:
        page = f"{url}/web?task=bursty_workload&seed=4&policy=heuristic&steps=6"
        dom = _run(["--dump-dom", page], tmp_path)
        assert dom.returncode == 0, dom.stderr[-2000:]
        html = dom.stdout
        assert 'data-state="done"' in html, html[-3000:]
        status = re.search(r'id="status"[^>]*>([^<]*)<', html).group(1)
        assert "task bursty_workload" in status and "step 6" in status, status
        # the tables were filled from the API's observation and reward components
        assert "ttft_p99_s" in html and "throughput_tok_s" in html
        for comp in ("throughput", "slo", "kv_band", "cost"):
            assert f"<td>{comp}</td>" in html
        assert steps_seen.count("POST /step") == 6 and steps_seen.count("POST /suggest") == 6
        assert "POST /reset" in steps_seen and "GET /tasks" in steps_seen

        shot = tmp_path / "web.png"
        res = _run([f"--screenshot={shot}", page], tmp_path)
        assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
        w, h = _png_size(shot)
        assert (w, h) == (1280, 1000)
        assert shot.stat().st_size > 30_000  # a blank page is a few kB; the rendered one ~150 kB
    out_dir = os.environ.get("INFERENCEGYM_SCREENSHOT_DIR")
    if out_dir:  # keep the artefact when asked (docs)
        shutil.copy(shot, Path(out_dir) / "web.png")


def test_chart_leaves_a_gap_for_windows_without_first_tokens():
    """Issue 25: a window without first tokens (the env reports ttft 0 with first_tokens = 0) is a
    gap in the chart, never a point at p99 TTFT = 0. The page's own chart.js, run under Node."""
    import json

    node = shutil.which("node")
    if node is None:
        msg = "node not found: install it with `apt-get install -y nodejs`"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    static = Path(__file__).resolve().parents[2] / "inferencegym" / "apps" / "env_server" / "static"
    history = [{"ttft_p50_s": 0.1, "ttft_p99_s": 0.2, "first_tokens": 1.0, "tbt_p99_s": 0.02, "tbt_samples": 1.0},
               {"ttft_p50_s": 0.0, "ttft_p99_s": 0.0, "first_tokens": 0.0, "tbt_p99_s": 0.03, "tbt_samples": 1.0},
               {"ttft_p50_s": 0.0, "ttft_p99_s": 0.0, "first_tokens": 0.0, "tbt_p99_s": 0.0, "tbt_samples": 0.0},
               {"ttft_p50_s": 0.2, "ttft_p99_s": 0.4, "first_tokens": 1.0, "tbt_p99_s": 0.01, "tbt_samples": 1.0}]
    script = (f"const c = require({json.dumps(str(static / 'chart.js'))});"
              f"const h = {json.dumps(history)};"
              "console.log(JSON.stringify(Object.fromEntries(['ttft_p50_s', 'ttft_p99_s', 'tbt_p99_s']"
              ".map((k) => [k, c.seriesPoints(h, k)]))));")
    out = subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    points = json.loads(out.stdout)
    assert points["ttft_p99_s"] == [0.2, None, None, 0.4]
    assert points["ttft_p50_s"] == [0.1, None, None, 0.2]
    assert points["tbt_p99_s"] == [0.02, 0.03, None, 0.01]
    # the page loads it and draws from it
    html = (static / "index.html").read_text()
    assert html.index("/web/static/chart.js") < html.index("/web/static/app.js")
    assert "seriesPoints(h, k)" in (static / "app.js").read_text()
    # and the env really flags such windows (the flag the chart reads)
    from inferencegym.envs.serve_env import LLMServeEnv

    env = LLMServeEnv("static_workload")
    _, info = env.reset(seed=0)
    _, _, _, _, info = env.step(env.action_space.sample())
    assert info["sim/first_tokens"] in (0.0, 1.0) and "sim/tbt_samples" in info
