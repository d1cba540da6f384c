"""The server's typed options, passed into ``create_app`` (never read from globals by the routes)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from phalanx.config import Settings
from phalanx.registry.parity_process import CHECK_SECONDS
from phalanx.server.boxing import BoxPolicy
from phalanx.server.oidc import OidcConfig

MiB = 1024 * 1024


class ServerSettings(BaseModel):
    """What ``phalanx server`` was started with.

    ``store`` says where experiments live (the same PHALANX_HOME / PHALANX_DB_URL the CLI uses);
    ``token`` (PHALANX_TOKEN or ``--token-file``) turns authentication on for every API call and page.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    store: Settings = Field(default_factory=Settings)
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None
    max_ingest_bytes: int = 16 * MiB
    max_file_bytes: int = 512 * MiB
    max_bundle_bytes: int = 64 * MiB  # a submitted experiment's code bundle (compressed): 413 above
    max_request_bytes: int = 1 * MiB  # every other request with a body (login form, stop)
    max_service_bytes: int = 64 * MiB  # a request to a service (a notebook saved, a batch to predict)
    body_idle_seconds: float = 60.0  # a request body that pauses longer than this is refused (408)
    poll_seconds: float = 0.5  # how often a live log stream looks for new lines
    ui_enabled: bool = True
    # Host-header names the server answers to (no ports; "*" for any). None: loopback names plus the
    # address it listens on (see phalanx.server.auth.default_allowed_hosts).
    allowed_hosts: list[str] | None = None
    login_attempts: int = 5  # wrong tokens per client address per minute before /login answers 429
    # `phalanx gc` every this many hours (orphaned run folders and spools, then VACUUM); 0: never
    gc_hours: float = 24.0
    oidc: OidcConfig | None = None  # single sign-on (docs/teams.md#single-sign-on)
    box: BoxPolicy | None = None  # what submitted code runs as (phalanx.server.boxing); None: not said
    # How many submits the launcher starts at once (unpacks, starts their supervisors or group
    # controllers), beside the API; 0: none: accepted submits wait, their rows status created, until
    # a server with launch workers runs on this home (the API alone: tests, a read-only front end).
    audit_refusals: bool = False  # also record refused attempts (403) in the audit trail (--audit-refusals)
    launch_workers: int = Field(default=2, ge=0, le=64)
    # How many submits are checked and written at once (the file read, the bundle kept, the accept
    # transaction); the others wait for a slot without holding one of the request threads, so a
    # burst of submits never makes the list or a chart wait for a thread (bench/submit_load.py).
    submit_slots: int = Field(default=4, ge=1, le=64)
    watch_seconds: float = Field(
        default=2.0, gt=0
    )  # how often the launcher's watcher looks (server/launcher.py)
    # alert hooks (server/alerting.py): how often the outbox is read, tries per delivery, the first
    # wait after a failed one (doubled each time), how long a receiver may take to answer
    alert_poll_seconds: float = Field(default=2.0, gt=0)
    alert_attempts: int = Field(default=5, ge=1, le=20)
    alert_backoff_seconds: float = Field(default=10.0, gt=0)
    alert_timeout_seconds: float = Field(default=10.0, gt=0)
    # hosts and networks hooks may reach although not public (--hook-allow; server/hook_guard.py)
    hook_allow: tuple[str, ...] = ()
    # services (server/services.py): one nobody reached for this long is stopped; boards take new
    # points this often
    service_idle_seconds: float = Field(default=1800.0, gt=0)
    service_refresh_seconds: float = Field(default=5.0, gt=0)
    service_limit: int = Field(default=8, ge=1, le=1000)  # service processes one project may run at once
    # notebook servers (--notebooks): off unless the admin turns them on, as a notebook's pages run
    # on this server's origin unless services have their own (docs/services.md#an-origin-per-service)
    notebooks: bool = False
    # where services are served, an origin of each one's own ('https://{id}.svc.example.com';
    # server/service_origin.py); None: on this server's origin, under /services/ID/
    service_origin: str | None = None
    # the address people reach this server at, for the experiment links alerts carry; None:
    # http://HOST:PORT/ as it listens
    public_url: str | None = None
    # how long a registration's model check (its own process: phalanx.registry.parity_process) may
    # run before it is killed and the model refused
    model_check_seconds: float = Field(default=CHECK_SECONDS, gt=0)
    # how many registrations check their model at once (each a process of up to 2 GiB and more); the
    # others wait for a slot without holding one of the request threads, so a burst of registrations
    # (one editor's hung models) neither fills the machine's memory nor stops the server answering
    model_check_slots: int = Field(default=2, ge=1, le=64)

    def link_base(self) -> str:
        """Where this server's pages are, as an alert links to them."""
        if self.public_url:
            return self.public_url.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"
