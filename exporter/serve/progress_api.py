"""``POST /v1/progress``: a job that does not log its steps reports them (off unless --progress-api on).

The body is read in pieces and refused past ``progress.body_max_bytes`` before it is parsed (and must
all arrive within ``http.body_timeout_seconds``, which the connection guard enforces); it must be
``application/json`` with exactly ``{namespace, pod, step}``; the store keeps a bounded number of pods,
only those holding GPUs on this node, and with --progress-check-address on only from the pod's own
address. Answers: 204, or 400/403/404/411/413/415/429/503 with one line of text (401 from the web
layer without the push token).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from starlette.requests import ClientDisconnect

from exporter.policy.thresholds import PROGRESS_BODY_BYTES
from exporter.sources.progress import ProgressError, ProgressStore

# Pushes that check the sender's address may wait on the Kubernetes API: they get threads of their own,
# so a slow API never takes the default pool's threads (which check basic-auth scrapes' passwords)
PUSH_THREADS = 2
_PUSHES = ThreadPoolExecutor(PUSH_THREADS, thread_name_prefix="progress-push")


async def _body(request: Request) -> bytes:
    limit = int(PROGRESS_BODY_BYTES.value)
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > limit):
        raise ProgressError(413, f"body over {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ProgressError(413, f"body over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def route(app: FastAPI, store: ProgressStore) -> None:
    @app.post("/v1/progress")
    async def progress(request: Request) -> Response:
        try:
            if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
                raise ProgressError(415, "Content-Type must be application/json")
            body = await _body(request)
            if store.senders is None:
                store.report(body)
            else:  # the pod's address may come from the Kubernetes API: a blocking call, off the loop
                sender = request.client.host if request.client else None
                await asyncio.get_running_loop().run_in_executor(_PUSHES, store.report, body, sender)
        except ProgressError as exc:
            return PlainTextResponse(f"{exc}\n", status_code=exc.status)
        except ClientDisconnect:  # closed before its body arrived (by the client or the body deadline)
            return Response(status_code=400)  # nobody reads it: the connection is gone
        return Response(status_code=204)
