"""A small OpenAI-compatible server for tests: chat completions (plain and streamed) with known delays.

Started on 127.0.0.1 on a free port in a background thread, so the code under test talks to it
through the official ``openai`` client over real HTTP. Stdlib only (``http.server``), so it adds
nothing to the project's dependencies.

* ``POST /v1/chat/completions`` and ``POST /v1/completions``:
  - non-streamed: the reply text comes from ``responder(body, call_index) -> str``;
  - streamed (``"stream": true``): server-sent events; the first token is sent ``ttft_s`` after the
    request arrived, then one token every ``itl_s``; ``max_tokens`` (or ``max_completion_tokens``)
    tokens in all; a final usage chunk when ``stream_options.include_usage`` is set.
* ``GET /v1/models``: one model.
* ``prefix_cache=True``: an infinite prefix cache over whitespace-separated words (one word = one
  token, ``block_tokens`` words per block, whole blocks of a common prefix hit, as vLLM's automatic
  prefix caching): streamed usage reports ``prompt_tokens`` (words) and
  ``prompt_tokens_details.cached_tokens``, and ``GET /metrics`` exports vLLM's counters
  ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` (Prometheus text).

Every request is recorded in ``server.requests`` (arrival time on the server's monotonic clock and
the parsed body) so tests can check pacing and concurrency.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[dict, int], "str | tuple[int, str]"]
"""``responder(body, call_index)`` -> reply text, or ``(status, message)`` for an API error."""


def _default_responder(body: dict, index: int) -> str:
    return "ok"


class FakeOpenAIServer:
    """``with FakeOpenAIServer(ttft_s=0.1, itl_s=0.02) as srv: OpenAI(base_url=srv.base_url, ...)``."""

    def __init__(self, *, responder: Responder | None = None, ttft_s: float = 0.05,
                 itl_s: float = 0.01, default_max_tokens: int = 16, model: str = "fake-model",
                 fail_status: int | None = None, prefix_cache: bool = False, block_tokens: int = 16) -> None:
        self.responder = responder or _default_responder
        self.ttft_s = float(ttft_s)
        self.itl_s = float(itl_s)
        self.default_max_tokens = int(default_max_tokens)
        self.model = model
        self.fail_status = fail_status
        self.prefix_cache = prefix_cache
        self.block_tokens = int(block_tokens)
        self._blocks: set = set()
        self.cache_queries = 0
        self.cache_hits = 0
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._active = 0
        self.max_active = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _lookup(self, body: dict) -> tuple[int, int]:
        """(prompt tokens, cached tokens) of a request; caches its full blocks."""
        if "messages" in body:
            text = " ".join(str(m.get("content", "")) for m in body["messages"])
        else:
            text = str(body.get("prompt", ""))
        words = text.split()
        n, B = len(words), self.block_tokens
        hit, miss = 0, False
        with self._lock:
            for k in range(n // B):
                key = tuple(words[: (k + 1) * B])
                if not miss and key in self._blocks:
                    hit += B
                else:
                    miss = True
                    self._blocks.add(key)
            self.cache_queries += n
            self.cache_hits += hit
        return n, hit

    def start(self) -> "FakeOpenAIServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request per connection; streams end at close

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/metrics" and server.prefix_cache:
                    data = ("# TYPE vllm:prefix_cache_queries counter\n"
                            f'vllm:prefix_cache_queries_total{{model_name="{server.model}"}} {server.cache_queries}\n'
                            "# TYPE vllm:prefix_cache_hits counter\n"
                            f'vllm:prefix_cache_hits_total{{model_name="{server.model}"}} {server.cache_hits}\n').encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                elif self.path.rstrip("/") == "/v1/models":
                    self._json(200, {"object": "list", "data": [
                        {"id": server.model, "object": "model", "created": 0, "owned_by": "fake"}]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                t_arrival = time.monotonic()
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._json(400, {"error": {"message": "body is not JSON"}})
                    return
                path = self.path.rstrip("/")
                if path not in ("/v1/chat/completions", "/v1/completions"):
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                with server._lock:
                    index = len(server.requests)
                    server.requests.append({"t": t_arrival, "path": path, "body": body})
                    server._active += 1
                    server.max_active = max(server.max_active, server._active)
                try:
                    if server.fail_status is not None:
                        self._json(server.fail_status, {"error": {"message": "injected failure"}})
                    elif body.get("stream"):
                        self._stream(body, path, t_arrival)
                    else:
                        self._complete(body, path, index)
                finally:
                    with server._lock:
                        server._active -= 1

            # ---------------------------------------------------------------------------
            def _json(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _complete(self, body: dict, path: str, index: int) -> None:
                text = server.responder(body, index)
                if isinstance(text, tuple):  # (status, message): an injected API error
                    self._json(text[0], {"error": {"message": text[1], "type": "invalid_request_error"}})
                    return
                usage = {"prompt_tokens": 10, "completion_tokens": max(1, len(text.split())),
                         "total_tokens": 10 + max(1, len(text.split()))}
                if path == "/v1/chat/completions":
                    choice = {"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": text}}
                    obj = "chat.completion"
                else:
                    choice = {"index": 0, "finish_reason": "stop", "text": text}
                    obj = "text_completion"
                self._json(200, {"id": f"cmpl-{index}", "object": obj, "created": 0,
                                 "model": body.get("model", server.model), "choices": [choice],
                                 "usage": usage})

            def _stream(self, body: dict, path: str, t_arrival: float) -> None:
                n = int(body.get("max_completion_tokens") or body.get("max_tokens")
                        or server.default_max_tokens)
                prompt_n, cached = server._lookup(body) if server.prefix_cache else (10, None)
                chat = path == "/v1/chat/completions"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                # token i is due at t_arrival + ttft + i * itl (absolute schedule: no drift)
                for i in range(n):
                    due = t_arrival + server.ttft_s + i * server.itl_s
                    delay = due - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    if chat:
                        delta = {"content": f" tok{i}"}
                        if i == 0:
                            delta["role"] = "assistant"
                        choice = {"index": 0, "delta": delta, "finish_reason": None}
                        obj = "chat.completion.chunk"
                    else:
                        choice = {"index": 0, "text": f" tok{i}", "finish_reason": None}
                        obj = "text_completion"
                    self._event({"id": "s", "object": obj, "created": 0, "model": server.model,
                                 "choices": [choice]})
                final = {"index": 0, "finish_reason": "length"}
                final.update({"delta": {}} if chat else {"text": ""})
                self._event({"id": "s", "object": "chat.completion.chunk" if chat else "text_completion",
                             "created": 0, "model": server.model, "choices": [final]})
                if (body.get("stream_options") or {}).get("include_usage"):
                    self._event({"id": "s", "object": "chat.completion.chunk", "created": 0,
                                 "model": server.model, "choices": [],
                                 "usage": {"prompt_tokens": prompt_n, "completion_tokens": n,
                                           "total_tokens": prompt_n + n,
                                           **({"prompt_tokens_details": {"cached_tokens": cached}}
                                              if cached is not None else {})}})
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

            def _event(self, payload: dict) -> None:
                self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
                self.wfile.flush()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-openai",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main() -> None:
    """``python tests/fakes/openai_server.py [--port P]``: run the fake by hand (prints its URL)."""
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ttft-s", type=float, default=0.05)
    p.add_argument("--itl-s", type=float, default=0.01)
    args = p.parse_args()
    srv = FakeOpenAIServer(ttft_s=args.ttft_s, itl_s=args.itl_s).start()
    print(srv.base_url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        srv.stop()


if __name__ == "__main__":
    main()
