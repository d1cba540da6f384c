"""`phalanx server`: the REST API and the web UI over the same store as the CLI."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from phalanx.cli.app import app, choice_option, fail
from phalanx.cli.service_options import NotebooksOpt, ServiceIdleOpt, ServiceLimitOpt, ServiceOriginOpt

if TYPE_CHECKING:
    from fastapi import FastAPI

    from phalanx.config import Settings
    from phalanx.server.oidc import OidcConfig

LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


# A token guarding a server other machines reach: login and bearer guesses are throttled per client
# address, but an attacker with many addresses (an IPv6 /64) could still try a short one out.
MIN_TOKEN_CHARS = 16


def is_loopback(host: str) -> bool:
    """True when ``host`` only listens on this machine (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token_file(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise fail(f"cannot read the token file {path}: {exc.strerror or exc}") from None
    if not token:
        raise fail(f"the token file {path} is empty; put the token on its first line")
    return token


def forwarded_ips(option: str | None) -> list[str]:
    """The proxies whose X-Forwarded-* headers the server believes: ``--forwarded-allow-ips``, else
    PHALANX_FORWARDED_ALLOW_IPS, else none (uvicorn's own default, 127.0.0.1, and its
    FORWARDED_ALLOW_IPS variable are not used). Exit 2 naming an entry that is no address."""
    import os

    source = "--forwarded-allow-ips"
    if option is None:
        option, source = os.environ.get("PHALANX_FORWARDED_ALLOW_IPS", ""), "PHALANX_FORWARDED_ALLOW_IPS"
    entries = [e.strip() for e in option.split(",") if e.strip()]
    for entry in entries:
        if entry == "*":
            continue
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise fail(
                f"{source}: {entry!r} is not an IP address or network; give the reverse proxy's "
                "addresses, e.g. 127.0.0.1 or 10.0.0.0/8 (comma-separated), or '*' for any"
            ) from None
    return entries


def oidc_config(
    issuer: str | None,
    client_id: str | None,
    secret_file: Path | None,
    user_claim: str,
    groups_claim: str | None,
    role_map: list[str] | None,
    redirect_url: str | None,
) -> OidcConfig | None:
    """Single sign-on's settings, or None without --oidc-issuer; exit 2 on a missing or wrong one.
    The client secret comes from a file or the environment, never the command line (``ps`` shows
    that to every user of the machine)."""
    import os

    if not issuer:
        if client_id or secret_file or role_map:
            raise fail("the --oidc-* options need --oidc-issuer URL (or PHALANX_OIDC_ISSUER)")
        return None
    try:
        import authlib  # noqa: F401
    except ImportError:
        raise fail("single sign-on needs authlib: pip install 'phalanx[oidc]'") from None
    from authlib.common.security import is_secure_transport

    from phalanx.errors import UsageError
    from phalanx.server.oidc import OidcConfig, parse_role_map

    issuer = issuer.rstrip("/")
    if not is_secure_transport(issuer):
        raise fail(f"--oidc-issuer {issuer}: the provider must be reached over https (or on loopback)")
    if not client_id:
        raise fail("--oidc-issuer needs --oidc-client-id ID (or PHALANX_OIDC_CLIENT_ID)")
    if secret_file is not None:
        secret = read_token_file(secret_file)
    else:
        secret = os.environ.get("PHALANX_OIDC_CLIENT_SECRET", "").strip()
    if not secret:
        raise fail(
            "--oidc-issuer needs the client secret: --oidc-client-secret-file FILE or "
            "PHALANX_OIDC_CLIENT_SECRET (never on the command line)"
        )
    entries = role_map if role_map else [os.environ.get("PHALANX_OIDC_ROLE_MAP", "")]
    try:
        mapped = parse_role_map(entries)
    except UsageError as exc:
        raise fail(exc.message) from None
    if mapped and not groups_claim:
        raise fail("--oidc-role-map needs --oidc-groups-claim CLAIM (e.g. groups) to read the groups from")
    return OidcConfig(
        issuer=issuer,
        client_id=client_id,
        client_secret=secret,
        user_claim=user_claim,
        groups_claim=groups_claim,
        role_map=mapped,
        redirect_url=redirect_url,
    )


class LogLevel(StrEnum):
    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    DEBUG = "debug"


def bind_listener(host: str, port: int) -> socket.socket:
    """Bind the server's address here and hand the bound socket to uvicorn: a port in use, a
    privileged port or an unknown host is an `error: ...` naming the fix instead of uvicorn's log
    lines and exit status 3, and no other process can take the port between this check and the
    server listening (a probe that closed its socket would leave that window open)."""
    import errno

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise fail(f"--host {host}: not an address of this machine ({exc.strerror}); try 127.0.0.1") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            why = "something else listens there; pick another --port (0: any free one), or stop it"
        elif exc.errno == errno.EACCES:
            why = "ports below 1024 need root; pick --port 1024 or higher"
        elif exc.errno == errno.EADDRNOTAVAIL:
            why = "that address is not one of this machine's; try --host 127.0.0.1"
        else:
            why = exc.strerror or str(exc)
        raise fail(f"cannot listen on {host}:{port}: {why}") from None
    return sock


def _access_log(path: Path | None, level: LogLevel) -> None:
    """Requests go to stderr with the server's other lines (at --log-level info or debug), or to
    ``path`` when given (always)."""
    import logging

    logger = logging.getLogger("phalanx.server.access")
    quiet = path is None and level not in (LogLevel.INFO, LogLevel.DEBUG)
    logger.setLevel(logging.WARNING if quiet else logging.INFO)
    logger.propagate = False
    handler: logging.Handler
    if path is not None:
        try:
            handler = logging.FileHandler(path)
        except OSError as exc:
            raise fail(f"cannot write the access log {path}: {exc.strerror or exc}") from None
    else:
        handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)


# `phalanx server`'s options, one alias each: the command's signature stays a readable list
HostOpt = Annotated[
    str, typer.Option(metavar="ADDRESS", help="address to listen on; a non-loopback one needs a token")
]
PortOpt = Annotated[
    int,
    typer.Option(
        min=0, max=65535, metavar="PORT", help="port to listen on (0: any free one; the start line names it)"
    ),
]
TokenFileOpt = Annotated[
    Path | None,
    typer.Option("--token-file", metavar="FILE", help="file holding the token (else PHALANX_TOKEN)"),
]
LogLevelOpt = Annotated[LogLevel, choice_option(LogLevel, "--log-level", help="how much the server logs")]
AllowedHostOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--allowed-host",
        metavar="NAME",
        help="a host name the server answers to (repeat; '*' for any; else PHALANX_ALLOWED_HOSTS, "
        "else loopback names and the --host address)",
    ),
]
AccessLogOpt = Annotated[
    Path | None, typer.Option("--access-log", metavar="FILE", help="append one line per request here")
]
AuditRefusalsOpt = Annotated[
    bool,
    typer.Option(
        "--audit-refusals", help="also record refused attempts (403: who tried what) in the audit trail"
    ),
]
GcHoursOpt = Annotated[
    float,
    typer.Option(
        "--gc-hours",
        min=0,
        metavar="HOURS",
        help="run `phalanx gc` (orphaned run folders and spools, then compact the store) every "
        "HOURS; 0: never",
    ),
]
ForwardedAllowIpsOpt = Annotated[
    str | None,
    typer.Option(
        "--forwarded-allow-ips",
        metavar="ADDRESSES",
        help="behind a reverse proxy: the proxy's addresses (comma-separated IPs or networks) whose "
        "X-Forwarded-For/-Proto headers are believed (else PHALANX_FORWARDED_ALLOW_IPS; default: "
        "none, every client is the address it connects from)",
    ),
]
OidcIssuerOpt = Annotated[
    str | None,
    typer.Option(
        "--oidc-issuer",
        envvar="PHALANX_OIDC_ISSUER",
        metavar="URL",
        help="single sign-on: the OpenID Connect provider's issuer URL (docs/teams.md#single-sign-on)",
    ),
]
OidcClientIdOpt = Annotated[
    str | None,
    typer.Option(
        "--oidc-client-id", envvar="PHALANX_OIDC_CLIENT_ID", metavar="ID", help="SSO: the client id"
    ),
]
OidcClientSecretFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--oidc-client-secret-file",
        envvar="PHALANX_OIDC_CLIENT_SECRET_FILE",
        metavar="FILE",
        help="SSO: file holding the client secret (else PHALANX_OIDC_CLIENT_SECRET)",
    ),
]
OidcUserClaimOpt = Annotated[
    str,
    typer.Option(
        "--oidc-user-claim",
        envvar="PHALANX_OIDC_USER_CLAIM",
        metavar="CLAIM",
        help="SSO: the ID token claim naming the user (then 'email', then 'sub')",
    ),
]
OidcGroupsClaimOpt = Annotated[
    str | None,
    typer.Option(
        "--oidc-groups-claim",
        envvar="PHALANX_OIDC_GROUPS_CLAIM",
        metavar="CLAIM",
        help="SSO: the ID token claim listing the user's groups (for --oidc-role-map)",
    ),
]
OidcRoleMapOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--oidc-role-map",
        metavar="GROUP=PROJECT:ROLE",
        help="SSO: members of GROUP get ROLE in PROJECT (repeat; else PHALANX_OIDC_ROLE_MAP, "
        "comma-separated)",
    ),
]
OidcRedirectUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--oidc-redirect-url",
        envvar="PHALANX_OIDC_REDIRECT_URL",
        metavar="URL",
        help="SSO: the callback URL registered at the provider (default: this server's "
        "address + /login/sso/callback)",
    ),
]


TrustSubmittersOpt = Annotated[
    bool,
    typer.Option(
        "--trust-submitters",
        help="run submitted code as this server's own account, unboxed (every editor can then act "
        "as a server admin: docs/security.md); logged as a warning",
    ),
]
BoxUidsOpt = Annotated[
    str | None,
    typer.Option(
        "--box-uids",
        metavar="FIRST-LAST",
        help="boxes take their projects' uids from this range instead of accounts made with useradd",
    ),
]
BoxReadOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--box-read", metavar="PATH", help="a path every box may read (repeat), besides the machine's"
    ),
]

HookAllowOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--hook-allow",
        metavar="HOST|NETWORK",
        help="a host, address or network alert hooks may reach although not public (repeat; docs/alerts.md)",
    ),
]

PublicUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--public-url",
        metavar="URL",
        help="the address people reach this server at, for the links alerts carry (default: "
        "http://HOST:PORT)",
    ),
]
AlertAttemptsOpt = Annotated[
    int, typer.Option("--alert-attempts", min=1, max=20, help="tries per alert delivery (docs/alerts.md)")
]
AlertBackoffOpt = Annotated[
    float,
    typer.Option(
        "--alert-backoff",
        min=0.01,
        metavar="SECONDS",
        help="the wait after an alert delivery's first failed try, doubled after each one",
    ),
]


def _check_addresses(hook_allow: list[str] | None, service_origin: str | None) -> None:
    """A malformed --hook-allow or --service-origin: exit 2 naming it, before serving."""
    from phalanx.server.hook_guard import HookGuard
    from phalanx.server.service_passes import ServiceOrigin

    HookGuard.allowing(hook_allow or ())
    if service_origin is not None and ServiceOrigin.parse(service_origin).scheme == "http":
        typer.echo(
            "warning: --service-origin is plain http: a browser sends a host's cookies to every port of"
            " it, where any program of this machine may listen (a job, a notebook's kernel): serve over"
            " https for people who do not trust each other (docs/services.md#an-origin-per-service)",
            err=True,
        )


@app.command("server")
def server(
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8000,
    token_file: TokenFileOpt = None,
    log_level: LogLevelOpt = LogLevel.INFO,
    allowed_host: AllowedHostOpt = None,
    access_log: AccessLogOpt = None,
    gc_hours: GcHoursOpt = 24.0,
    forwarded_allow_ips: ForwardedAllowIpsOpt = None,
    oidc_issuer: OidcIssuerOpt = None,
    oidc_client_id: OidcClientIdOpt = None,
    oidc_client_secret_file: OidcClientSecretFileOpt = None,
    oidc_user_claim: OidcUserClaimOpt = "preferred_username",
    oidc_groups_claim: OidcGroupsClaimOpt = None,
    oidc_role_map: OidcRoleMapOpt = None,
    oidc_redirect_url: OidcRedirectUrlOpt = None,
    trust_submitters: TrustSubmittersOpt = False,
    box_uids: BoxUidsOpt = None,
    box_read: BoxReadOpt = None,
    audit_refusals: AuditRefusalsOpt = False,
    public_url: PublicUrlOpt = None,
    alert_attempts: AlertAttemptsOpt = 5,
    alert_backoff: AlertBackoffOpt = 10.0,
    hook_allow: HookAllowOpt = None,
    service_idle_minutes: ServiceIdleOpt = 30.0,
    service_limit: ServiceLimitOpt = 8,
    notebooks: NotebooksOpt = False,
    service_origin: ServiceOriginOpt = None,
) -> None:
    """Serve the REST API (/api/v1) and the web UI (/) over this machine's Phalanx store."""
    from phalanx import knobs
    from phalanx.config import Settings

    knobs.check()  # its pages read some (the straggler threshold): refuse a malformed one at start
    settings = Settings()
    token = _server_token(token_file, host, settings)
    sso = oidc_config(
        oidc_issuer,
        oidc_client_id,
        oidc_client_secret_file,
        oidc_user_claim,
        oidc_groups_claim,
        oidc_role_map,
        oidc_redirect_url,
    )
    proxies = forwarded_ips(forwarded_allow_ips)
    listener = bind_listener(host, port)
    port = listener.getsockname()[1]  # --port 0: the free one the kernel gave
    _check_token_length(token, host)
    from phalanx.server.address import local_url, recorded
    from phalanx.server.app import create_app
    from phalanx.server.boxing import decide, start_line  # (start-up time: `phalanx server`'s own)
    from phalanx.server.boxing import recorded as box_recorded
    from phalanx.server.settings import ServerSettings

    _check_addresses(hook_allow, service_origin)
    _keep_home_private(settings.home)

    box = decide(
        trust=trust_submitters,
        report_to=local_url(host, port),
        uids=_uid_range(box_uids),
        hidden=tuple(str(p) for p in (settings.home, token_file) if p is not None),
        extra_ro=tuple(str(p.resolve()) for p in box_read or ()),
    )

    hosts = _allowed_hosts(allowed_host, host)
    _access_log(access_log, log_level)
    api = create_app(
        ServerSettings(
            store=settings,
            host=host,
            port=port,
            token=token,
            allowed_hosts=hosts or None,
            gc_hours=gc_hours,
            oidc=sso,
            box=box,
            audit_refusals=audit_refusals,
            public_url=public_url,
            alert_attempts=alert_attempts,
            alert_backoff_seconds=alert_backoff,
            hook_allow=tuple(hook_allow or ()),
            service_idle_seconds=service_idle_minutes * 60,
            service_limit=service_limit,
            notebooks=notebooks,
            service_origin=service_origin,
        )
    )
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"Phalanx server on http://{shown}:{port}/ (API: /api/v1/openapi.json)", err=True)
    typer.echo(start_line(box), err=True)
    # `phalanx run` names this address in its last line (ui_hint) while the server runs; the boxes'
    # policy is read by every launch it makes (server.boxing.isolation_for)
    with (
        recorded(settings.home, local_url(host, port), settings.database_url),
        box_recorded(settings.home, box),
    ):
        _serve(api, listener, host, port, log_level, proxies)


def _keep_home_private(home: Path) -> None:
    """Its home mode 0700: its store, every project's logs and files are no other account's to read
    (boxes are bound their own folders: server.private_home); a warning where that fails."""
    from phalanx.server.private_home import keep_private

    if warning := keep_private(home):
        typer.echo(warning, err=True)


def _uid_range(text: str | None) -> tuple[int, int] | None:
    """--box-uids FIRST-LAST, exit 2 naming the fix."""
    if text is None:
        return None
    from phalanx.errors import UsageError  # (start-up time: only with --box-uids)
    from phalanx.machine.identities import parse_range

    try:
        return parse_range(text)
    except UsageError as exc:
        raise fail(exc.message) from None


def _server_token(token_file: Path | None, host: str, settings: Settings) -> str | None:
    """The token from --token-file, else PHALANX_TOKEN; none is refused off loopback."""
    token = read_token_file(token_file) if token_file is not None else (settings.token or None)
    if not token and not is_loopback(host):
        raise fail(
            f"refusing to listen on {host} without a token: anyone who can reach it could read and delete "
            "experiments. Set PHALANX_TOKEN or pass --token-file FILE, or listen on 127.0.0.1."
        )
    return token


def _check_token_length(token: str | None, host: str) -> None:
    """A short token is refused on an address other machines reach (see MIN_TOKEN_CHARS)."""
    if token and not is_loopback(host) and len(token) < MIN_TOKEN_CHARS:
        raise fail(
            f"the token is {len(token)} characters long: too easy to guess for a server on {host}, "
            f"which other machines reach. Use at least {MIN_TOKEN_CHARS} random characters, e.g. "
            '`python -c "import secrets; print(secrets.token_urlsafe(32))"`.'
        )


def _allowed_hosts(allowed_host: list[str] | None, host: str) -> list[str]:
    """--allowed-host, else PHALANX_ALLOWED_HOSTS, plus the loopback names and --host; empty when
    neither is given (the server then uses its own default)."""
    import os

    hosts = list(allowed_host or [])
    if not hosts and os.environ.get("PHALANX_ALLOWED_HOSTS"):
        hosts = [h.strip() for h in os.environ["PHALANX_ALLOWED_HOSTS"].split(",") if h.strip()]
    if hosts:
        from phalanx.server.auth import default_allowed_hosts

        hosts = sorted({*default_allowed_hosts(host), *hosts})
    return hosts


def _serve(
    api: FastAPI, listener: socket.socket, host: str, port: int, log_level: LogLevel, proxies: list[str]
) -> None:
    import uvicorn

    # open live consoles (server-sent events) never end by themselves: do not wait for them on SIGTERM
    config = uvicorn.Config(
        api,
        host=host,
        port=port,
        log_level=log_level.value,
        access_log=False,
        timeout_graceful_shutdown=3,
        # uvicorn believes X-Forwarded-For from 127.0.0.1 by default: any local process could then
        # claim a new address per request and get a fresh login/token throttle budget each time
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or None,
    )
    server = uvicorn.Server(config)
    with listener, contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: as uvicorn.run, no traceback
        server.run(sockets=[listener])  # the socket bound above: the port cannot be lost
    if not server.started:  # as uvicorn.run: a failed start-up is exit status 3
        raise SystemExit(3)
