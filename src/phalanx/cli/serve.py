"""`phalanx serve NAME@alias`: serve a registered ONNX model over HTTP (phalanx.serving).

The port is bound here, before anything else starts (``--port 0``: any free port), and the line
``serving NAME@alias (version N, PROVIDER) at http://HOST:PORT`` is printed once the model is
loaded, so a script can read the address from the first line that starts with ``serving``.
"""

from __future__ import annotations

import secrets
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from phalanx.cli.app import app, fail
from phalanx.cli.server import bind_listener, is_loopback
from phalanx.cli.target import LocalOpt

if TYPE_CHECKING:
    from phalanx.domain import Resources
    from phalanx.registry.service import Registry
    from phalanx.serving.app import ServeOptions
    from phalanx.serving.follower import Follower
    from phalanx.serving.session import ServiceSession
    from phalanx.store.registry_records import ModelRef


# `phalanx serve`'s argument and options, one alias each: the command's signature stays a readable list
RefArg = Annotated[
    str,
    typer.Argument(
        metavar="NAME[@ALIAS|@N]", help="the registered model; with an alias, a moved alias is followed"
    ),
]
HostOpt = Annotated[str, typer.Option("--host", help="address to listen on")]
PortOpt = Annotated[int, typer.Option("--port", help="port (0: any free port, printed)", min=0, max=65535)]
WorkersOpt = Annotated[
    int, typer.Option("--workers", min=1, max=64, help="ONNX Runtime calls (batches) run at once")
]
BatchingOpt = Annotated[
    bool, typer.Option("--batching/--no-batching", help="join concurrent requests into one call")
]
MaxBatchOpt = Annotated[int, typer.Option("--max-batch", min=1, help="rows per call at most")]
MaxWaitMsOpt = Annotated[
    float,
    typer.Option(
        "--max-wait-ms", min=0.0, help="how long a batch waits for more (0: only what queued meanwhile)"
    ),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="PHALANX_SERVE_TOKEN",
        help="the bearer token clients send (default: a new one, printed)",
    ),
]
NoAuthOpt = Annotated[bool, typer.Option("--no-auth", help="ask no token (loopback addresses only)")]
PollSecondsOpt = Annotated[
    float, typer.Option("--poll-seconds", min=0.05, help="how often the alias is checked for a move")
]
IntraThreadsOpt = Annotated[
    int, typer.Option("--threads", min=0, help="ONNX Runtime threads per call (0: its default)")
]
TrackSecondsOpt = Annotated[
    float,
    typer.Option(
        "--track-seconds",
        min=0.0,
        help="report requests and latency into a service experiment this often (0: no experiment)",
    ),
]
LogLevelOpt = Annotated[str, typer.Option("--log-level", help="uvicorn's: warning, info, debug")]
ServeServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server",
        metavar="URL",
        help="Serve a model of this Phalanx server's registry (default: the one `phalanx login` chose); "
        "the version is pulled through its API with your token.",
    ),
]
OnServerOpt = Annotated[
    bool,
    typer.Option(
        "--on-server",
        help="Run it on the server as a service instead (boxed, started again when it dies, reached at "
        "URL/services/ID/ by the project's members); prints where, then returns.",
    ),
]

ReplicasOpt = Annotated[
    int,
    typer.Option(
        "--replicas",
        min=1,
        max=16,
        metavar="N",
        help="With --on-server: N processes behind its one address, taking turns at its requests (each "
        "started again when it dies, the others serving meanwhile).",
    ),
]


CpuOpt = Annotated[
    str | None,
    typer.Option(
        "--cpu", metavar="CORES", help="With --on-server: each replica's cores (2, or 500m), from the ledger."
    ),
]
MemoryOpt = Annotated[
    str | None,
    typer.Option(
        "--memory", metavar="SIZE", help="With --on-server: each replica's memory (512Mi, 2Gi), capped."
    ),
]
GpuOpt = Annotated[
    int | None,
    typer.Option("--gpu", metavar="N", min=0, help="With --on-server: each replica's GPUs, by name."),
]


@app.command("serve")
def serve(
    ref: RefArg,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8500,
    workers: WorkersOpt = 1,
    batching: BatchingOpt = True,
    max_batch: MaxBatchOpt = 64,
    max_wait_ms: MaxWaitMsOpt = 0.0,
    token: TokenOpt = None,
    no_auth: NoAuthOpt = False,
    poll_seconds: PollSecondsOpt = 0.5,
    intra_threads: IntraThreadsOpt = 0,
    track_seconds: TrackSecondsOpt = 5.0,
    log_level: LogLevelOpt = "warning",
    server: ServeServerOpt = None,
    local: LocalOpt = False,
    on_server: OnServerOpt = False,
    replicas: ReplicasOpt = 1,
    cpu: CpuOpt = None,
    memory: MemoryOpt = None,
    gpu: GpuOpt = None,
) -> None:
    """Serve a registered ONNX model: POST /v1/models/NAME:predict (JSON or .npy), /healthz, /metrics.
    After `phalanx login` (or with --server URL) the model is one of the server's registry; with
    --on-server the server serves it as a service."""
    from phalanx.store.registry_records import parse_ref

    parsed = parse_ref(ref)
    resources = _resources(cpu, memory, gpu)
    if on_server:
        _submit(str(parsed), server, local, replicas, resources)
        return
    if replicas != 1:
        raise fail("--replicas is a service's, on a server (--on-server); here --workers serves more at once")
    if resources is not None:
        raise fail(
            "--cpu, --memory and --gpu are what a served model takes of the server's machine (--on-server);"
            " here it runs on what you start it with (taskset, CUDA_VISIBLE_DEVICES)"
        )
    _check_options(host, token, no_auth, log_level)
    _require_serve_extra()
    import uvicorn

    from phalanx.cli.models import registry_door
    from phalanx.serving.app import ServeOptions, create_serving_app
    from phalanx.serving.follower import Follower

    registry, here = registry_door(server, local)  # says which door once a server is in play
    sock = bind_listener(host, port)
    sock.listen(2048)
    sock.set_inheritable(True)
    follower = Follower(
        parsed, registry.resolve, registry.read_bytes, poll_seconds=poll_seconds, intra_threads=intra_threads
    )
    generated = token is None and not no_auth
    if generated:
        token = secrets.token_urlsafe(24)
    options = ServeOptions(
        batching=batching,
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        workers=workers,
        token=None if no_auth else token,
    )
    session = None
    if track_seconds > 0 and here is None:
        sys.stderr.write(
            "phalanx: no service experiment for a model of a server's registry (not recorded there yet);"
            " its requests and latency are at /metrics\n"
        )
    elif track_seconds > 0 and here is not None:
        session = _open_session(here, follower, parsed, options, host, track_seconds)
    serving_app = create_serving_app(follower, options, session)
    _announce(parsed, follower, session, sock.getsockname()[:2], token if generated else None)
    config = uvicorn.Config(
        serving_app, log_level=log_level, lifespan="on", access_log=log_level in ("info", "debug")
    )
    http_server = uvicorn.Server(config)
    http_server.run(sockets=[sock])


def _resources(cpu: str | None, memory: str | None, gpu: int | None) -> Resources | None:
    """Each replica's cores, memory and GPUs as limits (None: none asked); exit 2 for a bad size."""
    from phalanx.domain import Range, Resources  # why: the foreground server's start stays lean
    from phalanx.spec.quantities import parse_cpu, parse_memory

    if cpu is None and memory is None and gpu is None:
        return None
    try:
        cores = parse_cpu(cpu) if cpu is not None else None
        mib = parse_memory(memory) if memory is not None else None
    except ValueError as exc:
        raise fail(f"--cpu/--memory: {exc}") from None
    if cores == 0 or mib == 0:
        raise fail("--cpu and --memory take a positive size (leave one out for none)")
    return Resources(cpu=Range(limits=cores), memory=Range(limits=mib), gpu=Range(limits=gpu or None))


def _submit(ref: str, server: str | None, local: bool, replicas: int, resources: Resources | None) -> None:
    """``ref`` served by the server as a service (docs/services.md): where it answers."""
    from phalanx.logins import choose  # why: the server's client only when one is in play
    from phalanx.remote_store import RemoteServices

    if local:
        raise fail("--on-server and --local contradict each other: a service runs on a server")
    client = choose(server, False, local_option=None)
    if client is None:
        raise fail("--on-server runs it on a Phalanx server: `phalanx login URL` first, or give --server URL")
    services = RemoteServices(client)
    found = services.start_model(ref, replicas, resources)
    url = services.url_of(found)
    serving = int(found.get("replicas", 1))
    said = f"{'started' if found['started'] else 'already served'}, {serving} replica{'s' * (serving > 1)}"
    if not found["started"] and serving != replicas:
        sys.stderr.write(
            f"phalanx: it was served already with {serving} replica{'s' * (serving > 1)}, not the {replicas}"
            f" asked: stop it (the Services page, or DELETE /api/v1/services/{found['id']}) and serve it"
            " again to change them\n"
        )
    name = ref.split("@")[0]
    typer.echo(f"{ref} on the server ({said}, service {found['id']}): POST {url}v1/models/{name}:predict")
    if found.get("holds"):
        typer.echo(f"its replicas hold {found['holds']} of the server's machine together")
    typer.echo(
        "(with Authorization: Bearer <your token>; the Services page or DELETE /api/v1/services/ID stops it)"
    )


def _check_options(host: str, token: str | None, no_auth: bool, log_level: str) -> None:
    """The mistakes found before the port is bound: contradicting auth options, an unknown level."""
    if no_auth and token:
        raise fail("--no-auth and --token (or PHALANX_SERVE_TOKEN) contradict each other: give one")
    if no_auth and not is_loopback(host):
        raise fail(
            f"--no-auth listens only on a loopback address, not {host!r}: use --host 127.0.0.1, or drop "
            "--no-auth and give clients the token"
        )
    if log_level not in ("critical", "error", "warning", "info", "debug"):
        raise fail(f"--log-level {log_level!r}: use warning, info or debug")


def _require_serve_extra() -> None:
    """Exit 2 saying how to install the serve extra when one of its modules does not import."""
    try:
        import onnxruntime  # noqa: F401
        import uvicorn  # noqa: F401

        from phalanx.serving.app import ServeOptions, create_serving_app  # noqa: F401
        from phalanx.serving.follower import Follower  # noqa: F401
    except ImportError as exc:
        raise fail(
            f"phalanx serve needs the serve extra ({exc.name} is missing): pip install 'phalanx[serve]'"
        ) from None


def _announce(
    ref: ModelRef,
    follower: Follower,
    session: ServiceSession | None,
    bound: tuple[str, int],
    generated_token: str | None,
) -> None:
    """The lines a user (or a script) reads: a generated token, the service experiment, and last the
    ``serving ... at http://HOST:PORT`` line, flushed at once."""
    bound_host, bound_port = bound
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    if generated_token is not None:
        typer.echo(
            f"token: {generated_token}  (clients send Authorization: Bearer <token>; --token sets your own)"
        )
    loaded = follower.current
    if session is not None:
        typer.echo(
            f"service experiment: {session.id} (its requests and latency: phalanx get {session.id}, the UI)"
        )
    typer.echo(f"serving {ref} (version {loaded.version}, {loaded.provider}) at http://{shown}:{bound_port}")
    sys.stdout.flush()


def _open_session(
    registry: Registry, follower: Follower, ref: ModelRef, options: ServeOptions, host: str, interval: float
) -> ServiceSession:
    """The service experiment of this session, in the project of the model it serves."""
    from phalanx.config import Settings
    from phalanx.serving.session import ServiceSession

    settings = Settings()
    loaded = follower.current
    params = {
        "model": ref.name,
        "following": str(ref),
        "version_at_start": loaded.version,
        "provider": loaded.provider,
        "host": host,
        "batching": options.batching,
        "max_batch": options.max_batch,
        "max_wait_ms": options.max_wait_ms,
        "workers": options.workers,
        "auth": options.token is not None,
    }
    return ServiceSession.open(
        name=f"serve {ref}",
        project=registry.project_of(ref.name),
        params=params,
        version=lambda: follower.current.version,
        spool_root=settings.spool_dir,
        runs_root=settings.runs_dir,
        interval=interval,
    )
