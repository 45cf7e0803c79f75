"""A deterministic OpenAI-compatible chat-completions server for the end-to-end tests.

OpenCode talks to it as a custom provider, so the tests run offline and every reply is known.
The last user message carries tags that script the reply:

- no tag: a plain reply, ``"Reply to: <prompt>"`` (streamed in a few chunks);
- ``[fake:tool]``: the first step calls ``bash`` (``echo fake-tool-ran``), the next step replies;
- ``[fake:slow]``: a reply streamed one chunk every 0.5 s for about a minute (to cancel it);
- ``[fake:delay=N]``: the plain reply after N seconds;
- ``[fake:fail400]``: HTTP 400 with an OpenAI-style error body (a provider error);
- ``[fake:429=N]``: HTTP 429 (``Retry-After: 1``) to the first N requests with this prompt,
  then the plain reply (OpenCode retries 429 by itself, up to 6 requests a turn);
- ``[fake:429-on=MODEL]``: HTTP 429 to every request for that model id, the plain reply on
  any other (a fallback model answers);
- ``[fake:context]``: replies ``context-seen`` when an earlier user message holds
  ``<inherited_context>``, else ``context-missing`` (proves the fork reached the model).

- ``[fake:call=TOOL {json}]`` (one or more): the first step calls each TOOL with those
  arguments (in one step); the next step replies ``"Tool results:\n"`` and the tools' outputs
  joined by ``"\n---\n"`` (to drive plugin tools such as ``asyncagents_task``);
- ``[fake:wake-output]`` in any user message of the session: a later user message holding an
  ``[asyncagents notice`` (the parent woken by its task's notice) makes the model call
  ``asyncagents_output`` for the first task id in it, then reply ``"Child result: "`` and the
  text after ``Result:\n`` in that tool's output (up to its usage line).

- ``[fake:hang=N]``: the stream starts, then nothing comes for N seconds (a hung provider);
- ``[fake:loop]``: every step calls ``bash`` again, one second after the request (a tool loop
  that never ends by itself).

Every stream ends with a usage report that depends on the request (`usage_of`): prompt tokens
(some of them cached), completion and reasoning tokens, as OpenAI-compatible servers report it.
Title requests get a fixed title. Every request body is kept in `requests` for assertions.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAIL_MESSAGE = "Invalid request: fake provider rejects this prompt"
CALL_TAG = "[fake:call="
WAKE_TAG = "[fake:wake-output]"
NOTICE_MARK = "[asyncagents notice"


def scripted_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    """The ``[fake:call=TOOL {json}]`` tags of a prompt, in order."""
    calls: list[tuple[str, dict[str, Any]]] = []
    decoder = json.JSONDecoder()
    start = text.find(CALL_TAG)
    while start >= 0:
        rest = start + len(CALL_TAG)
        space = text.index(" ", rest)
        arguments, end = decoder.raw_decode(text, space + 1)
        calls.append((text[rest:space], arguments))
        start = text.find(CALL_TAG, end)
    return calls


def _tool_outputs(messages: list[dict[str, Any]]) -> list[str]:
    """The contents of the tool results at the end of the conversation, in order."""
    out: list[str] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        out.append(_text(message.get("content")))
    return out[::-1]


TOOL_OUTPUT_MARK = "fake-tool-ran"


def usage_of(payload: dict[str, Any]) -> dict[str, Any]:
    """The usage a request is answered with: it grows with the conversation, so each step's
    differs, and it has cached prompt tokens and reasoning tokens."""
    size = len(json.dumps(payload.get("messages") or []))
    prompt = 100 + size // 10
    cached = size // 40
    completion = 20 + len(payload.get("messages") or [])
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": 7},
    }


def _text(content: Any) -> str:
    """The text of an OpenAI message content (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


class FakeModel:
    """The server and its request log; `start()` binds a free port on 127.0.0.1."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        #: requests answered 429, by prompt
        self.rate_limited: dict[str, int] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> FakeModel:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                body = json.dumps({"object": "list", "data": [{"id": "fake-model"}]}).encode()
                self._send(200, body, "application/json")

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                payload = json.loads(self.rfile.read(length) or b"{}")
                with model._lock:
                    model.requests.append(payload)
                try:
                    model._answer(self, payload)
                except (BrokenPipeError, ConnectionResetError):
                    return

            def _send(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _answer(self, h: BaseHTTPRequestHandler, payload: dict[str, Any]) -> None:
        messages: list[dict[str, Any]] = payload.get("messages") or []
        system = " ".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
        users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
        last_user = users[-1] if users else ""
        after_tool = bool(messages) and messages[-1].get("role") == "tool"
        self._local.usage = usage_of(payload)  # what this request's stream ends with
        if "title generator" in system:
            return self._stream(h, ["Fake title"])
        hang = re.search(r"\[fake:hang=([0-9.]+)\]", last_user)
        if hang:
            self._start_sse(h)
            self._chunk(h, {"role": "assistant", "content": ""}, None)
            time.sleep(float(hang.group(1)))
            return self._stream(h, ["Woke up"])
        if "[fake:loop]" in last_user:
            time.sleep(1.0)
            return self._stream_tool_call(h)
        if CALL_TAG in last_user:
            if after_tool:
                reply = "Tool results:\n" + "\n---\n".join(_tool_outputs(messages))
                return self._stream(h, [reply])
            return self._stream_calls(h, scripted_calls(last_user))
        if NOTICE_MARK in last_user and any(WAKE_TAG in u for u in users[:-1]):
            if after_tool:
                output = "\n".join(_tool_outputs(messages))
                result = output.split("Result:\n", 1)[1] if "Result:\n" in output else output
                result = result.split("\nUsage: ", 1)[0]  # the output's last line
                return self._stream(h, ["Child result: " + result.strip()])
            task_id = re.search(r"tsk_[0-9a-f]+", last_user)
            arguments = {"task_id": task_id.group(0) if task_id else ""}
            return self._stream_calls(h, [("asyncagents_output", arguments)])
        if self._rate_limit(h, last_user, str(payload.get("model") or "")):
            return None
        if "[fake:fail400]" in last_user:
            body = json.dumps(
                {
                    "error": {
                        "message": FAIL_MESSAGE,
                        "type": "invalid_request_error",
                        "code": "fake_error",
                    }
                }
            ).encode()
            h.send_response(400)
            h.send_header("content-type", "application/json")
            h.send_header("content-length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return None
        if "[fake:tool]" in last_user and not after_tool:
            return self._stream_tool_call(h)
        if "[fake:context]" in last_user:
            seen = any("<inherited_context>" in u for u in users[:-1])
            return self._stream(h, ["context-seen" if seen else "context-missing"])
        delay = re.search(r"\[fake:delay=([0-9.]+)\]", last_user)
        if delay:
            time.sleep(float(delay.group(1)))
        if "[fake:slow]" in last_user:
            return self._stream(h, ["slow "] * 120, pause=0.5)
        reply = "Tool step done. " if after_tool else ""
        reply += "Reply to: " + last_user.strip()
        return self._stream(h, [reply[i : i + 40] for i in range(0, len(reply), 40)] or [""])

    def _rate_limit(self, h: BaseHTTPRequestHandler, prompt: str, model: str) -> bool:
        """Answer 429 when the prompt's tags ask for it (counted per prompt)."""
        count = re.search(r"\[fake:429=(\d+)\]", prompt)
        on = re.search(r"\[fake:429-on=([\w.-]+)\]", prompt)
        with self._lock:
            done = self.rate_limited.get(prompt, 0)
            limited = bool(count and done < int(count.group(1))) or bool(
                on and on.group(1) == model
            )
            if limited:
                self.rate_limited[prompt] = done + 1
        if not limited:
            return False
        body = json.dumps(
            {"error": {"message": "Rate limited: slow down", "type": "rate_limit_error"}}
        ).encode()
        h.send_response(429)
        h.send_header("content-type", "application/json")
        h.send_header("retry-after", "1")
        h.send_header("content-length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
        return True

    def _start_sse(self, h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("cache-control", "no-cache")
        h.send_header("connection", "close")
        h.end_headers()
        h.close_connection = True

    def _chunk(self, h: BaseHTTPRequestHandler, delta: dict[str, Any], finish: str | None) -> None:
        data = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": "fake-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        h.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")
        h.wfile.flush()

    def _finish(self, h: BaseHTTPRequestHandler) -> None:
        usage = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": "fake-model",
            "choices": [],
            "usage": getattr(self._local, "usage", None) or usage_of({}),
        }
        h.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
        h.wfile.write(b"data: [DONE]\n\n")
        h.wfile.flush()

    def _stream(self, h: BaseHTTPRequestHandler, pieces: list[str], pause: float = 0.0) -> None:
        self._start_sse(h)
        self._chunk(h, {"role": "assistant", "content": ""}, None)
        for piece in pieces:
            self._chunk(h, {"content": piece}, None)
            if pause:
                time.sleep(pause)
        self._chunk(h, {}, "stop")
        self._finish(h)

    def _stream_calls(
        self, h: BaseHTTPRequestHandler, calls: list[tuple[str, dict[str, Any]]]
    ) -> None:
        """One step calling each tool of `calls` (parallel tool calls)."""
        self._start_sse(h)
        self._chunk(h, {"role": "assistant", "content": ""}, None)
        for index, (name, arguments) in enumerate(calls):
            call = {
                "index": index,
                "id": f"call_fake_{os.urandom(6).hex()}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            self._chunk(h, {"tool_calls": [call]}, None)
        self._chunk(h, {}, "tool_calls")
        self._finish(h)

    def _stream_tool_call(self, h: BaseHTTPRequestHandler) -> None:
        self._start_sse(h)
        self._chunk(h, {"role": "assistant", "content": ""}, None)
        args = json.dumps({"command": f"echo {TOOL_OUTPUT_MARK}", "description": "Echo a mark"})
        call = {
            "index": 0,
            "id": "call_fake_1",
            "type": "function",
            "function": {"name": "bash", "arguments": args},
        }
        self._chunk(h, {"tool_calls": [call]}, None)
        self._chunk(h, {}, "tool_calls")
        self._finish(h)


if __name__ == "__main__":
    server = FakeModel().start()
    print(server.base_url, flush=True)
    threading.Event().wait()
