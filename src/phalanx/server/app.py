"""The Phalanx server: the REST API under /api/v1 and the web UI at /, over the CLI's store.

``create_app(settings)`` builds everything from typed settings (no globals), so tests make as many
independent apps as they like. Errors from anywhere map through ``errors.HTTP_STATUS`` to a JSON body
``{"error": code, "message": ...}``.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import WebSocketRoute

from phalanx._version import __version__
from phalanx.errors import PhalanxError, UsageError, http_status
from phalanx.server.alerting import Deliverer, Retry
from phalanx.server.apidocs import install_docs
from phalanx.server.audit import AuditMiddleware
from phalanx.server.auth import SecurityMiddleware, default_allowed_hosts, signed_in
from phalanx.server.boxing import isolation_for
from phalanx.server.echoes import cut_echoes
from phalanx.server.files import ArtifactFiles
from phalanx.server.gate import ChartGate
from phalanx.server.hook_guard import HookGuard
from phalanx.server.launcher import Launcher
from phalanx.server.limits import BodyLimitMiddleware
from phalanx.server.oidc import RelyingParty
from phalanx.server.outages import RETRY_AFTER_SECONDS, OutageLog, unavailable
from phalanx.server.policy import enforce, policy
from phalanx.server.routes import alerts as alert_routes
from phalanx.server.routes import (
    artifacts,
    clusters,
    compare,
    data,
    experiments,
    groups,
    ingest,
    logs,
    metrics,
    models,
    pages,
    params,
    runs,
    sso,
    submit,
    teams,
)
from phalanx.server.routes import queue as queue_routes
from phalanx.server.routes import quotas as quota_routes
from phalanx.server.routes import secrets as secret_routes
from phalanx.server.routes import services as service_routes
from phalanx.server.schemas import ErrorOut
from phalanx.server.service_origin import ServiceOriginMiddleware
from phalanx.server.service_passes import Passes, ServiceOrigin
from phalanx.server.services import Services, Timing
from phalanx.server.sessions import STRONG_TOKEN_CHARS, BearerThrottle, LoginThrottle, Sessions
from phalanx.server.settings import ServerSettings
from phalanx.server.sweeper import Sweeper
from phalanx.store import open_store
from phalanx.store.accounts import Accounts
from phalanx.store.alerts import outbox
from phalanx.store.base import LocalStore
from phalanx.store.outages import STORAGE_ERRORS
from phalanx.tokens import box_key

log = logging.getLogger(__name__)

API = "/api/v1"

HTTP_CODES = {
    400: "usage",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
}


def create_app(settings: ServerSettings, store: LocalStore | None = None) -> FastAPI:
    """Build the app. ``store`` defaults to the one ``settings.store`` names (SQLite or PostgreSQL)."""
    if store is None:
        store = open_store(settings.store)
    sweeper: Sweeper | None = None
    launcher = Launcher(store, settings.store, workers=settings.launch_workers, period=settings.watch_seconds)
    services = Services(
        store,
        settings.store.home,
        lambda project: isolation_for(settings.store, project),
        Timing(
            idle_seconds=settings.service_idle_seconds,
            refresh_seconds=settings.service_refresh_seconds,
            per_project=settings.service_limit,
        ),
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        nonlocal sweeper
        if settings.gc_hours > 0:
            sweeper = Sweeper(store, settings.store, settings.gc_hours * 3600).start()
        app.state.sweeper = sweeper
        if settings.launch_workers:  # its first pass starts what a killed server had accepted
            launcher.start()
        deliverer = _deliverer(settings, store)
        app.state.deliverer = deliverer
        services.start()
        try:
            yield
        finally:
            services.close()
            if deliverer is not None:
                deliverer.stop()
            launcher.stop()
            if sweeper is not None:
                sweeper.stop()
            metrics.close_chart_pool(app)
            app.state.accounts.close()

    app = FastAPI(
        lifespan=lifespan,
        title="Phalanx",
        version=__version__,
        description="Run and track distributed deep-learning experiments.",
        openapi_url=f"{API}/openapi.json",
        docs_url=None,  # Swagger UI loads its assets from a CDN; these machines have no internet
        redoc_url=None,
        dependencies=[Depends(enforce)],  # every route's declared policy (phalanx.server.policy)
    )
    _install_state(app, settings, store)
    app.state.launcher = launcher
    app.state.services = services
    # services on origins of their own (--service-origin), and the passes their hosts take
    app.state.service_origin = (
        ServiceOrigin.parse(settings.service_origin) if settings.service_origin is not None else None
    )
    app.state.passes = Passes()
    app.state.submit_slots = anyio.CapacityLimiter(settings.submit_slots)
    app.state.model_check_slots = anyio.CapacityLimiter(settings.model_check_slots)
    app.state.model_check_turns = {}  # project -> its registrations' turn (routes/models.py)
    app.state.model_checks_held = {}  # project -> its registrations in the server (routes/models.py)
    _install_routes(app, settings)
    _install_error_handlers(app)
    _install_openapi(app)
    _install_middleware(app, settings)
    return app


def _deliverer(settings: ServerSettings, store: LocalStore) -> Deliverer | None:
    """The alert hooks' deliverer, started (None for a store that keeps no hooks)."""
    try:
        box = outbox(store)
    except UsageError:
        return None
    retry = Retry(
        attempts=settings.alert_attempts,
        backoff=settings.alert_backoff_seconds,
        timeout=settings.alert_timeout_seconds,
        poll=settings.alert_poll_seconds,
    )
    return Deliverer(box, settings.link_base(), retry, guard=HookGuard.allowing(settings.hook_allow)).start()


def _install_state(app: FastAPI, settings: ServerSettings, store: LocalStore) -> None:
    """What the routes and the middleware read from ``app.state``: the store, artifact files, accounts,
    sessions, single sign-on and the two sign-in throttles."""
    app.state.settings = settings
    app.state.store = store
    app.state.outages = OutageLog()  # the database or disk gone: one log line per outage
    # Serve files from the store's own artifact root when it has one (a store passed in by a caller).
    files = store.artifact_store
    app.state.files = ArtifactFiles(files.root_url if files is not None else settings.store.artifacts_root)
    accounts = Accounts(store)
    app.state.accounts = accounts
    # a tokenless server needs sessions once it has users: keyed by a secret of this process (its
    # users sign in again after a restart); a server token keys them as before
    sessions = (
        Sessions(settings.token, settings.store.home / "server" / "sessions.json")
        if settings.token
        else Sessions(secrets.token_urlsafe(32), None)
        if accounts is not None
        else None
    )
    app.state.sessions = sessions
    app.state.oidc = None
    if settings.oidc is not None and settings.ui_enabled:
        app.state.oidc = RelyingParty(settings.oidc)
    # the login form's budget is per address; wrong bearer tokens are throttled per token (a cron
    # job's stale token must not lock out the valid tokens of everybody behind its address), and per
    # address only for guesses at a short server token (server.sessions.BearerThrottle)
    app.state.login_throttle = LoginThrottle(attempts=settings.login_attempts)
    guessable = bool(settings.token) and len(settings.token or "") < STRONG_TOKEN_CHARS
    if guessable:
        log.warning(
            "the server token is shorter than %d characters: wrong bearer tokens that could be guesses"
            " at it are throttled per client address, which can make a right one wait a minute; use"
            ' a longer one (python -c "import secrets; print(secrets.token_urlsafe(32))")',
            STRONG_TOKEN_CHARS,
        )
    app.state.bearer_throttle = BearerThrottle(
        attempts=settings.login_attempts, server_token_guessable=guessable
    )


def _install_routes(app: FastAPI, settings: ServerSettings) -> None:
    """/api/v1/health, then every API router, then (with the UI) the pages and static files: in this
    order, which the route table (and tests/unit/server/test_policies.py) lists."""

    @app.get(f"{API}/health", tags=["server"])
    @policy("public")
    def health() -> dict[str, Any]:
        return {"ok": True, "version": __version__}

    routers = (
        experiments,
        submit,
        metrics,
        compare,
        params,
        artifacts,
        data,
        logs,
        ingest,
        groups,
        runs,
        models,
        queue_routes,
        teams,
        clusters,
        quota_routes,
        secret_routes,
        alert_routes,
        service_routes,
    )
    for module in routers:
        app.include_router(module.router, prefix=API)
    app.include_router(service_routes.page_router)  # the services themselves, for browsers and API clients
    app.router.routes.append(
        WebSocketRoute("/services/{service_id}/{path:path}", service_routes.proxied_socket)
    )
    if settings.ui_enabled:
        install_docs(app, f"{API}/openapi.json")
        app.include_router(pages.router)
        if settings.oidc is not None:
            app.include_router(sso.router)
        app.include_router(groups.page_router)
        app.include_router(models.page_router)
        app.include_router(data.page_router)
        app.mount("/static", StaticFiles(directory=pages.UI_DIR), name="static")


def _install_middleware(app: FastAPI, settings: ServerSettings) -> None:
    """Body limits, then auth, then the chart gate: each added later wraps the ones before it."""
    sessions = app.state.sessions
    accounts = app.state.accounts

    def limit_for(path: str, method: str) -> int:
        if path == f"{API}/ingest":
            return settings.max_ingest_bytes
        if method == "PUT" and "/files/" in path:
            return settings.max_file_bytes
        if method == "POST" and path == f"{API}/experiments":
            return settings.max_bundle_bytes + settings.max_request_bytes  # the bundle and the form
        if method == "POST" and path == f"{API}/services":  # a notebook's code, base64
            return settings.max_bundle_bytes * 4 // 3 + settings.max_request_bytes
        if path.startswith("/services/"):
            return settings.max_service_bytes
        return settings.max_request_bytes

    # Added later = further out: the audit trail sees each change's answer (inside auth, which says
    # who asks), the size check runs before anything reads a body, auth before that.
    app.add_middleware(AuditMiddleware, accounts=accounts, refusals=settings.audit_refusals)
    app.add_middleware(BodyLimitMiddleware, limit_for=limit_for, idle_seconds=settings.body_idle_seconds)
    allowed = (
        settings.allowed_hosts if settings.allowed_hosts is not None else default_allowed_hosts(settings.host)
    )
    boxing = settings.box is not None and settings.box.mode == "box"
    app.add_middleware(
        SecurityMiddleware,
        token=settings.token,
        allowed_hosts=allowed,
        sessions=sessions,
        throttle=app.state.bearer_throttle,
        accounts=accounts,
        box_key=box_key(settings.store.home) if boxing else None,  # boxed replicas' tokens
        outages=app.state.outages,
    )
    # outermost: a chart read waits for its turn before even the sign-in check (phalanx.server.gate)
    app.add_middleware(ChartGate, slots=metrics.CHART_SLOTS)
    origin: ServiceOrigin | None = app.state.service_origin
    if origin is not None:  # further out still: a service's host never reaches the server's routes

        def who(user: str | None) -> Any:
            admin = accounts.first_admin() if user is None and accounts is not None else None
            return signed_in(accounts, user, admin)

        app.add_middleware(
            ServiceOriginMiddleware,
            origin=origin,
            passes=app.state.passes,
            services=app.state.services,
            who=who,
            sessions=sessions,
            server_url=settings.link_base(),
            body_limit=settings.max_service_bytes,
            idle_seconds=settings.body_idle_seconds,
        )


ERROR_RESPONSES = {
    400: "bad request: malformed input, or a Host header this server does not answer to",
    401: "no token, or a wrong one (servers started with a token)",
    403: "refused: a cross-site request, a replica token used beyond its experiment, or a role too low",
    404: "no such experiment (or file), or one in a project you are not a member of",
    409: "conflicts with the experiment's state",
    413: "request body too large",
    422: "invalid parameters",
    429: "too many wrong tokens from this address (wait Retry-After seconds), or a submit beyond its"
    " project's max-waiting quota",
    503: "the server's database or disk is unavailable: try again after Retry-After seconds (a submit"
    " with the same Idempotency-Key never starts twice)",
}


def _install_openapi(app: FastAPI) -> None:
    """The document says how to authenticate (bearer) and what errors look like (ErrorOut)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        doc = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        components = doc.setdefault("components", {})
        components.setdefault("securitySchemes", {})["bearer"] = {
            "type": "http",
            "scheme": "bearer",
            "description": "the server's token, a user's personal token (docs/teams.md), "
            "or a replica's per-experiment token (docs/security.md)",
        }
        schemas = components.setdefault("schemas", {})
        schemas["ErrorOut"] = ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
        doc["security"] = [{"bearer": []}]
        error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
        for path, operations in doc.get("paths", {}).items():
            for operation in operations.values():
                responses = operation.setdefault("responses", {})
                for status, why in ERROR_RESPONSES.items():
                    if status == 429 and path == f"{API}/health":
                        continue
                    entry = responses.setdefault(str(status), {"description": why})
                    entry["content"] = error  # also replaces FastAPI's own 422 shape: ours is ErrorOut
                if path == f"{API}/health":
                    operation["security"] = []
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


def _error(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": code, "message": cut_echoes(message)},
        status_code=status,
        headers=dict(headers) if headers else None,
    )


def _install_error_handlers(app: FastAPI) -> None:
    outages: OutageLog = app.state.outages

    def outage(request: Request, reason: str) -> JSONResponse:
        outages.note(request.method, request.url.path, reason)
        return _error(
            503, "unavailable", f"{reason}; try again shortly", {"Retry-After": str(RETRY_AFTER_SECONDS)}
        )

    @app.exception_handler(PhalanxError)
    async def phalanx_error(request: Request, exc: PhalanxError) -> JSONResponse:
        status = http_status(exc)
        if status == 503:
            return outage(request, exc.message)
        if status >= 500:
            log.error("%s %s failed: %s", request.method, request.url.path, exc)
        return _error(status, exc.code, exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, HTTP_CODES.get(exc.status_code, "error"), str(exc.detail), exc.headers)

    def failed(request: Request, exc: Exception) -> JSONResponse:
        # the database or the disk going away: 503, one line in the log per outage; anything else
        # is a bug: the same JSON shape as every other error, the traceback in the log (not the answer)
        reason = unavailable(exc)
        if reason is not None:
            return outage(request, reason)
        log.exception("%s %s failed", request.method, request.url.path, exc_info=exc)
        return _error(500, "error", f"internal error ({type(exc).__name__}); the server log has the details")

    # Storage's own errors by their classes: Starlette answers these here and is done (a handler of
    # Exception itself runs too, but Starlette then raises the error again, to the server's log)
    for storage_error in STORAGE_ERRORS:

        @app.exception_handler(storage_error)
        async def storage_failed(request: Request, exc: Exception) -> JSONResponse:
            return failed(request, exc)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        return failed(request, exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err.get("loc", ()))
            problems.append(f"{where}: {err.get('msg', 'invalid')}")
        return _error(422, "invalid_request", "; ".join(problems) or "invalid request")
