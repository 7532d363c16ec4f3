"""What reaches Gradio's own routes: an ASGI middleware in front of the app that answers the requests Gradio
would answer with a stack trace in the log, or would take without a bound, with one short refusal instead.

- A queue call naming an endpoint that does not exist (`fn_index` -1 or 99999): Gradio raised a KeyError inside
  its route (HTTP 500 and a 70-line traceback); refused with 422 and one log line.
- The REST routes (`/gradio_api/call/...`): the queue is the only way in (`api_open=False`), but a POST to a call
  route still reached Gradio and failed with a 500; answered 404.
- Uploads: at most MAX_REQUEST_FILES files of the types the page takes (`.json`), MAX_REQUEST_FILES x the upload
  limit in all, checked on the whole body before Gradio writes a file (Gradio took 200 files, `.exe` and `.html`,
  in one request).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable

from specviz.core.inputs import brief

log = logging.getLogger("specviz.ui")

Scope = dict
Message = dict
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

UPLOAD_TYPES = (".json",)  # the only files the page asks for: traces
JOIN_BODY_BYTES = 16 * 1024 * 1024  # a queue call's values (a 1 MB prompt is refused with a message, not here)
_FILENAME = re.compile(rb'filename\*?="?([^";\r\n]*)', re.IGNORECASE)


class RequestGuard:
    """The middleware; `endpoints()` gives the number of the app's endpoints, `files` and `upload_bytes` the
    bounds of one upload."""

    def __init__(self, app: ASGIApp, endpoints: Callable[[], int], files: int, upload_bytes: int):
        self.app, self.endpoints, self.files, self.upload_bytes = app, endpoints, files, upload_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method = scope.get("path", ""), scope.get("method", "")
        if "/gradio_api/call/" in path or path.startswith("/call/"):
            return await _refuse(send, 404, "not found: this app is called through its queue only")
        if method == "POST" and path.endswith("/queue/join"):
            return await self._join(scope, receive, send)
        if method == "POST" and path.endswith("/upload"):
            return await self._upload(scope, receive, send)
        return await self.app(scope, receive, send)

    async def _join(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _body(receive, JOIN_BODY_BYTES)
        if body is None:
            return await _refuse(send, 413, f"a queue call takes {JOIN_BODY_BYTES:,} bytes at most")
        try:
            fn_index = json.loads(body).get("fn_index")
        except (ValueError, AttributeError, RecursionError):
            fn_index = None  # Gradio answers a malformed body itself (422, no traceback)
        known = self.endpoints()
        if fn_index is not None and (type(fn_index) is not int or not 0 <= fn_index < known):
            log.warning("refused a queue call: no endpoint %s", brief(fn_index))
            return await _refuse(send, 422, f"no endpoint {brief(fn_index)}; this app has {known}")
        await self.app(scope, _replay(body, receive), send)

    async def _upload(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.files * self.upload_bytes + 64 * 1024  # the files and their multipart headers
        body = await _body(receive, limit)
        if body is None:
            limits = f"an upload takes {self.files} files of {self.upload_bytes:,} bytes at most"
            return await _refuse(send, 413, limits)
        problem = self.upload_problem(dict(scope.get("headers") or []), body)
        if problem is not None:
            log.warning("refused an upload: %s", problem)
            return await _refuse(send, 400, problem)
        await self.app(scope, _replay(body, receive), send)

    def upload_problem(self, headers: dict, body: bytes) -> str | None:
        """What is wrong with a multipart upload's parts: more than `files`, or a type the page does not take."""
        kind = headers.get(b"content-type", b"")
        boundary = re.search(rb'boundary="?([^";]+)', kind)
        if boundary is None:
            return None  # not multipart: Gradio refuses it itself
        parts = body.split(b"--" + boundary.group(1))[1:-1]
        found = (_FILENAME.search(part[:2048]) for part in parts)  # a part's headers come first
        names = [match.group(1).decode("utf-8", "replace") for match in found if match]
        if len(names) > self.files:
            return f"{len(names):,} files in one upload; the page takes {self.files} at most"
        wrong = [name for name in names if not name.lower().endswith(UPLOAD_TYPES)]
        if wrong:
            return f"{brief(wrong[0])}: only {', '.join(UPLOAD_TYPES)} files (traces) are taken"
        return None


async def _body(receive: Receive, limit: int) -> bytes | None:
    """The request's whole body, or None once it passes `limit` bytes (nothing more is read)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the app the body already read, then whatever the connection says next."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _refuse(send: Send, status: int, message: str) -> None:
    content = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})
