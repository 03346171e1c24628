"""A scripted stand-in for a remote LLM API: a local HTTP server (http.server in a thread) answering OpenAI
``/v1/chat/completions`` and Gemini ``:generateContent`` requests from a script of replies.

    with ScriptedLlm(['{"action": "search", "query": "x"}', reply_fn, 500]) as llm:
        ...  # point ENGRAM_MODELS__LLM_BASE_URL at llm.openai_url (or llm.url for Gemini)
        path, body = llm.requests[0]

Each request takes the next step of the script: a string is the reply's text, a dict is sent as its JSON
text, a callable gets the request body and returns either, and an int answers with that HTTP status (an
error). A request after the script's end gets 500. ``requests`` holds each request's (path, JSON body).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = str | dict | int | Callable[[dict], str | dict]


def last_user_text(body: dict) -> str:
    """The text of the last user turn of an OpenAI or Gemini request body."""
    if "messages" in body:
        return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
    turn = next(c for c in reversed(body["contents"]) if c.get("role", "user") == "user")
    return "".join(p.get("text", "") for p in turn["parts"])


class ScriptedLlm:
    """The stub server (a context manager: started on enter, stopped on exit)."""

    def __init__(self, script: list[Step]) -> None:
        self.script = list(script)
        self.requests: list[tuple[str, dict]] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub._lock:
                    stub.requests.append((self.path, body))
                    step: Any = stub.script.pop(0) if stub.script else 500
                if callable(step):
                    step = step(body)
                if isinstance(step, int):
                    return self._send(step, {"error": {"message": f"scripted status {step}", "code": step}})
                text = step if isinstance(step, str) else json.dumps(step)
                if self.path.endswith("/chat/completions"):
                    answer = {
                        "id": "c1",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model"),
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                        ],
                    }
                else:
                    answer = {
                        "candidates": [
                            {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}
                        ]
                    }
                self._send(200, answer)

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (Gemini's base URL)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def openai_url(self) -> str:
        """The OpenAI-compatible base URL (``<url>/v1``)."""
        return self.url + "/v1"

    def __enter__(self) -> ScriptedLlm:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
