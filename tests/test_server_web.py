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
