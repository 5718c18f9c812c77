"""A scripted HTTP server and clients that record their waits, for retry logic.

The retry rules are tested against these (a real server cannot be told to
answer 503 to the second request only); behaviour is tested against the real app.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from queuey.client import QueueyClient
from tests.support import free_port


class ScriptedServer:
    """An in-process fake HTTP server answering from a script (for retry logic only).

    Each scripted answer is ``(status, body, headers, delay)``; requests beyond
    the script get 200 ``{"status": "ok"}``. Every request is recorded.
    """

    def __init__(self) -> None:
        self.script: list[tuple[int, dict, dict, float]] = []
        self.requests: list[tuple[str, str, bytes]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with outer.lock:
                    outer.requests.append((self.command, self.path, body))
                    step = outer.script.pop(0) if outer.script else (200, {"status": "ok"}, {}, 0)
                status, payload, headers, delay = step
                if delay:
                    time.sleep(delay)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass

            do_GET = do_POST = do_PUT = do_DELETE = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def answer(self, status: int, payload: dict, headers=None, delay: float = 0.0):
        self.script.append((status, payload, headers or {}, delay))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def refused_url() -> str:
    """A loopback URL nothing listens on (connection refused)."""
    return f"http://127.0.0.1:{free_port()}"


def make_client(urls, **kwargs) -> QueueyClient:
    kwargs.setdefault("backoff", 0.01)
    kwargs.setdefault("max_backoff", 0.05)
    client = QueueyClient(urls, "app", "key", **kwargs)
    client.sleeps = []
    real_sleep = client._sleep

    def sleep(seconds: float) -> None:
        client.sleeps.append(seconds)
        real_sleep(min(seconds, 0.05))

    client._sleep = sleep
    return client
