"""The serving endpoint: ``POST /v1/models/NAME:predict``, ``/healthz``, ``/metrics``.

Every predict answer names the version that computed it (``"version"`` in JSON, the
``X-Model-Version`` header always). A token is required (``Authorization: Bearer``) on every path
but ``/healthz`` unless the server was started with ``--no-auth`` (loopback only, see cli/serve.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.types import ASGIApp, Receive, Scope, Send

from phalanx.serving.batching import Batcher
from phalanx.serving.codec import NPY, NPZ, InvalidInput, decode, encode_npy, encode_npz
from phalanx.serving.follower import Follower, Loaded
from phalanx.serving.session import ServiceSession

PUBLIC = ("/healthz",)


@dataclass(frozen=True)
class ServeOptions:
    batching: bool = True
    max_batch: int = 64
    max_wait_ms: float = 0.0
    workers: int = 1
    token: str | None = None  # None: no token asked (--no-auth)
    max_body_bytes: int = 64 << 20


class _Metrics:
    def __init__(self, follower: Follower) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "phalanx_serve_requests",
            "predict requests answered",
            ["model", "version", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "phalanx_serve_request_seconds",
            "predict latency, body read to answer written",
            ["model"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5),
            registry=self.registry,
        )
        self.batch_rows = Histogram(
            "phalanx_serve_batch_rows",
            "rows per ONNX Runtime call",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 1024),
            registry=self.registry,
        )
        version = Gauge(
            "phalanx_serve_model_version", "the version being served", ["model"], registry=self.registry
        )
        version.labels(follower.ref.name).set_function(lambda: follower.current.version)
        reloads = Gauge(
            "phalanx_serve_reloads", "versions loaded after the first (alias moves)", registry=self.registry
        )
        reloads.set_function(lambda: follower.reloads)


class _TokenMiddleware:
    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in PUBLIC:
            header = dict(scope["headers"]).get(b"authorization", b"")
            scheme, _, given = header.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self.token):
                response = JSONResponse(
                    {
                        "error": "unauthorized",
                        "message": "send Authorization: Bearer <token> (phalanx serve printed it)",
                    },
                    status_code=401,
                    headers={"www-authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _error(status: int, code: str, message: str, version: int | None = None) -> JSONResponse:
    headers = {} if version is None else {"x-model-version": str(version)}
    return JSONResponse({"error": code, "message": message}, status_code=status, headers=headers)


def create_serving_app(
    follower: Follower, options: ServeOptions, session: ServiceSession | None = None
) -> FastAPI:
    """The endpoint; with ``session``, every predict request and batch is also counted into the
    service experiment (phalanx.serving.session), which ends when the server shuts down."""
    metrics = _Metrics(follower)
    batcher = _batcher(follower, options, metrics, session)
    name = follower.ref.name

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await batcher.start()
        follower.start()
        ticks = asyncio.create_task(session.run()) if session is not None else None
        try:
            yield
        finally:
            follower.stop()
            await batcher.stop()
            if ticks is not None and session is not None:
                ticks.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ticks
                session.close()  # here, not after uvicorn returns: it re-raises SIGTERM then

    # FastAPI's own OpenTelemetry hooks look up three providers in every request (the endpoint has
    # its Prometheus /metrics): off, as the predict route's dependency solving (issue 42)
    app = FastAPI(
        title=f"phalanx serve {follower.ref}",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # the routes are documented in docs/models.md
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )

    async def predict(request: Request) -> Response:
        started = time.perf_counter()
        model = request.path_params["model"]
        status = 200
        version: int | None = None
        try:
            if model != name:
                status = 404
                return _error(404, "not_found", f"this server serves {name!r}, not {model!r}")
            batcher.arriving += 1  # a batch waiting up to max_wait waits only for such requests
            try:
                body = await request.body()
            finally:
                batcher.arriving -= 1
            if len(body) > options.max_body_bytes:
                status = 413
                return _error(
                    413, "too_large", f"the body is over {options.max_body_bytes} bytes: split the batch"
                )
            content_type = request.headers.get("content-type", "application/json")
            try:
                inputs = decode(body, content_type, follower.current.signature)
            except InvalidInput as exc:
                status = 422
                return _error(422, exc.code, str(exc))
            loaded, outputs = await batcher.predict(inputs)
            version = loaded.version
            return _outputs_response(name, loaded, outputs, request.headers.get("accept", ""))
        except Exception as exc:  # ONNX Runtime refused the batch: say so, keep serving
            status = 500
            return _error(500, "predict_failed", f"{type(exc).__name__}: {exc}", version)
        finally:
            took = time.perf_counter() - started
            metrics.requests.labels(name, str(version) if version is not None else "-", str(status)).inc()
            metrics.latency.labels(name).observe(took)
            if session is not None:
                session.observe(status, took)

    # a plain Starlette route, the first one tried: FastAPI's dependency solving cost every request
    # 35 µs of the server's CPU (a tenth of its 0.4 ms a request, issue 42), and the other routes'
    # patterns were tried before it; the body is read and decoded here
    app.add_route("/v1/models/{model}:predict", predict, methods=["POST"])
    _install_info_routes(app, follower, metrics)
    if options.token:
        app.add_middleware(_TokenMiddleware, token=options.token)
    return app


def _batcher(
    follower: Follower, options: ServeOptions, metrics: _Metrics, session: ServiceSession | None
) -> Batcher:
    """The batcher of predict calls; each batch's size goes to /metrics and the service experiment."""
    observe_rows = metrics.batch_rows.observe

    def on_batch(rows: int) -> None:
        observe_rows(rows)
        if session is not None:
            session.observe_batch(rows)

    return Batcher(
        lambda: follower.current,
        enabled=options.batching,
        max_batch=options.max_batch,
        max_wait=options.max_wait_ms / 1000,
        workers=options.workers,
        on_batch=on_batch,
    )


def _install_info_routes(app: FastAPI, follower: Follower, metrics: _Metrics) -> None:
    """/healthz, /metrics (Prometheus) and /v1/models/NAME (its signature)."""

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        loaded = follower.current
        return {
            "ok": True,
            "model": loaded.name,
            "version": loaded.version,
            "following": str(follower.ref),
            "provider": loaded.provider,
            "follow_error": follower.last_error,
        }

    @app.get("/metrics")
    def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    name = follower.ref.name

    @app.get("/v1/models/{model}")
    def describe(model: str) -> Any:
        if model != name:
            return _error(404, "not_found", f"this server serves {name!r}, not {model!r}")
        loaded = follower.current
        return {"model": name, "version": loaded.version, "signature": loaded.signature}


def _outputs_response(name: str, loaded: Loaded, outputs: list[np.ndarray], accept: str) -> Response:
    """The model's outputs as the client accepts them: one .npy, an .npz of all, or JSON."""
    version = loaded.version
    out_names = [o["name"] for o in loaded.signature.get("outputs", [])]
    headers = {"x-model-version": str(version)}
    if NPY in accept and len(outputs) == 1:
        return Response(encode_npy(outputs[0]), media_type=NPY, headers=headers)
    if NPZ in accept:
        return Response(
            encode_npz(dict(zip(out_names, outputs, strict=False))), media_type=NPZ, headers=headers
        )
    doc = {
        "model": name,
        "version": version,
        "outputs": {n: np.asarray(o).tolist() for n, o in zip(out_names, outputs, strict=False)},
    }
    return JSONResponse(doc, headers=headers)
