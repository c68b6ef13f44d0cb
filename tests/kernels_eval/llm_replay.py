"""A chat-completions endpoint on 127.0.0.1 that replays recorded responses in order (tests/fixtures/agent/),
keeps every request it was sent, and refuses past the recording; stopped by the test that started it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

EXCHANGE = Path(__file__).resolve().parents[1] / "fixtures" / "agent" / "llm_exchange.json"
MAX_BODY = 4 << 20


class ReplayServer:
    """Serves POST .../chat/completions from a list of recorded responses; `requests` holds what came in."""

    def __init__(self, responses: list[dict]) -> None:
        self.responses, self.requests = list(responses), []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(min(length, MAX_BODY)) or b"{}")
                owner.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                ok = self.path.endswith("/chat/completions") and "messages" in body and bool(owner.responses)
                reply = owner.responses.pop(0) if ok else {"error": {"message": "no recorded response left"}}
                data = json.dumps(reply).encode()
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> "ReplayServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def recorded_responses() -> list[dict]:
    """The recorded responses of the fixture exchange, in order."""
    return [x["response"] for x in json.loads(EXCHANGE.read_text())["exchanges"]]
