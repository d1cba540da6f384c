"""The services a server runs for its projects (docs/services.md): TensorBoard boards and notebook
servers.

``Services`` keeps one TensorBoard per target object (an experiment, a group, a project) and one
notebook server (JupyterLab) per project: asked again, it hands back the one that runs. Each is a
process in the project's box (the same account, namespaces and allow-listed environment as the
project's experiments, phalanx.machine.box) that listens on a Unix socket in a folder of that
account's, never on a TCP port: it is reached only through the server's ``/services/ID/`` proxy
(phalanx.server.proxy), under the project's roles (a board: its viewers; a notebook: its editors).

One refresher thread renders what experiments reported since its last pass into each board's
folder (phalanx.services.boards), stops a service nobody reached in ``idle_seconds`` and forgets
one whose process died (asking again starts a new one). The server's end stops them all; a box ends
with the server anyway (bubblewrap's ``--die-with-parent``), and a notebook's kernels end with
their notebook server (they watch their parent), so nothing outlives it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from phalanx import extras
from phalanx.backends.local.boxes import PACKAGE_ROOT
from phalanx.errors import NotFound, PhalanxError, QuotaExceeded
from phalanx.machine import box
from phalanx.machine.box import Isolation
from phalanx.registry.service import Registry
from phalanx.server.service_process import Process, Spawned, tail
from phalanx.services.targets import Target
from phalanx.serving.folder import publish, published
from phalanx.store.accounts import Role
from phalanx.store.base import LocalStore
from phalanx.store.registry_records import ModelRef, parse_ref

if TYPE_CHECKING:
    from phalanx.services.boards import Board

log = logging.getLogger(__name__)

TENSORBOARD = "tensorboard"
NOTEBOOK = "notebook"
MODEL = "model"  # a registered model served (phalanx.serving.folder)
SOCKET = "service.sock"
LISTEN = "listen"  # in a service's folder: the folder its socket is in
LISTEN_PREFIX = "phalanx-service-"
SERVED = "served.json"  # in a served model's folder: what it serves, for the next server
LOG = "service.log"  # its process's output, in its folder (the reason a start failed)
# in a service's environment: its folder (in the server's home), how a leftover is found (tests)
MARK = "PHALANX_SERVICE"


class ServiceFailed(PhalanxError):
    """A service's process ended before it listened (its log's last lines say why)."""

    code = "unavailable"


@dataclass
class Service:
    """One running service. ``role``: the least role in ``project`` that reaches it."""

    id: str
    kind: str
    project: str
    target: Target
    folder: Path
    socket: Path
    process: Process
    board: Board | None  # a TensorBoard's; a notebook has none
    started_by: str
    role: Role = Role.viewer
    started_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)
    # a served model's: its process again (a new one, same id and socket folder) when it dies, and
    # what hands a moved alias's version over to it; how often it was started again
    respawn: Callable[[], Service] | None = None
    follow: Callable[[], None] | None = None
    restarts: int = 0

    @property
    def manage_role(self) -> Role:
        """The least role that starts or stops it: a board's viewers; a notebook's or a served
        model's editors (code runs in one, the other holds the project's resources)."""
        return Role.viewer if self.kind == TENSORBOARD else Role.editor

    @property
    def path(self) -> str:
        return f"/services/{self.id}/"

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "kind": self.kind,
            "project": self.project,
            "target": {"kind": self.target.kind, "id": self.target.id},
            "path": self.path,
            "started_by": self.started_by,
            "started_at": self.started_at,
            "idle_seconds": round(time.monotonic() - self.last_used, 1),
            "restarts": self.restarts,
        }


@dataclass(frozen=True)
class Launch:
    """What a service is, before its process: its id, kind, project, target, who asked, the least
    role that reaches it and its board (a TensorBoard's)."""

    id: str
    kind: str
    project: str
    target: Target
    who: str
    role: Role
    board: Board | None


@dataclass(frozen=True)
class Timing:
    """``idle_seconds``: a service nobody reached for this long is stopped; ``refresh_seconds``:
    how often boards take new points; ``start_seconds``: how long a start may take to listen."""

    idle_seconds: float = 1800.0
    refresh_seconds: float = 5.0
    start_seconds: float = 120.0
    per_project: int = 8  # services one project may have running at once (each holds ~100 MiB)


class Services:
    """The server's running services. ``isolation_for(project)``: its box (None: not boxed)."""

    def __init__(
        self,
        store: LocalStore,
        home: Path,
        isolation_for: Callable[[str], Isolation | None],
        timing: Timing = Timing(),
    ) -> None:
        self.store = store
        self.home = home
        self.isolation_for = isolation_for
        self.timing = timing
        self._services: dict[str, Service] = {}
        self._lock = threading.Lock()
        self._starting = threading.Lock()  # one start at a time: two asks for one board start it once
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # every process is started from this one thread, which lives as long as the services: what
        # ties a process to the server's life (bubblewrap's --die-with-parent, setpriv's
        # --pdeathsig) follows the thread that started it, and a request's worker thread may end
        self._spawner: ThreadPoolExecutor | None = None

    def start(self) -> Services:
        """Start the refresher (again after ``close``: an app's lifespan may run more than once),
        after removing what an ended server's services left and serving its models again."""
        if self._thread is None or not self._thread.is_alive():
            self._stop = threading.Event()
            self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="phalanx-service-start")
            self._sweep()
            self._thread = threading.Thread(target=self._loop, name="phalanx-services", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop the refresher and every service."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for service in self.listed():  # a served model is served again by the next server
            self._end(service, keep=service.respawn is not None)
        if self._spawner is not None:
            self._spawner.shutdown(wait=True)

    def _sweep(self) -> None:
        """What the services of a server that ended (stopped or killed) left, before any runs: the
        folder each listened in (named in ``LISTEN``; its process ended with that server) and its
        own folder, except a served model's, which is served again under its id (``SERVED``: an
        answered serve lasts until it is stopped, across restarts)."""
        root = self.home / "services"
        for folder in sorted(root.iterdir()) if root.is_dir() else ():
            with contextlib.suppress(OSError):
                listen = Path((folder / LISTEN).read_text().strip())
                if listen.name.startswith(LISTEN_PREFIX):
                    shutil.rmtree(listen, ignore_errors=True)
            try:
                served = json.loads((folder / SERVED).read_text())
            except (OSError, ValueError):
                shutil.rmtree(folder, ignore_errors=True)
                continue
            self._serve_again(folder.name, served)

    def _serve_again(self, service_id: str, served: Mapping[str, str]) -> None:
        """The served model of ``served`` (its ref, who served it) started again under its id; a
        model that cannot be (deleted since, a broken file) is logged and its folder removed."""
        try:
            ref = parse_ref(served["ref"])
            registry = Registry(self.store)
            self.add(
                self._start_model(registry.project_of(ref.name), ref, registry, served["who"], service_id)
            )
            log.info("service %s: %s served again", service_id, ref)
        except Exception:
            log.exception("service %s: the model it served could not be served again", service_id)
            shutil.rmtree(self.home / "services" / service_id, ignore_errors=True)

    def listed(self, projects: tuple[str, ...] | None = None) -> list[Service]:
        """The running services, those of ``projects`` only when given, oldest first."""
        with self._lock:
            found = list(self._services.values())
        return [s for s in found if projects is None or s.project in projects]

    def get(self, service_id: str) -> Service:
        with self._lock:
            found = self._services.get(service_id)
        if found is None:  # worded as for a service of a project the caller is not in: nothing told
            raise NotFound(
                f"service {service_id} does not exist (or is in a project you are not a member of)"
            )
        return found

    def touch(self, service: Service) -> None:
        service.last_used = time.monotonic()

    def tensorboard(self, project: str, target: Target, who: str) -> tuple[Service, bool]:
        """The TensorBoard of ``target`` (in ``project``), started unless one runs; (it, started)."""
        return self._one_of(
            TENSORBOARD, project, target, who, lambda: self._start_tensorboard(project, target, who)
        )

    def notebook(self, project: str, inputs: Mapping[str, str], who: str) -> tuple[Service, bool]:
        """The project's notebook server, started unless one runs; (it, started). ``inputs``: the
        environment that names its inputs' folders (``PHALANX_INPUT_NAME``: a path), which its
        kernels inherit and its box may read; one that runs keeps the inputs it started with."""
        target = Target("project", project)
        return self._one_of(
            NOTEBOOK, project, target, who, lambda: self._start_notebook(project, inputs, who)
        )

    def model(self, ref: ModelRef, who: str) -> tuple[Service, bool]:
        """``ref`` (``NAME@alias``, ``NAME@N``, ``NAME``: its latest) served in its model's project,
        started unless it is: the version handed over as files, a moved alias followed by the
        refresher, and its process started again whenever it dies, until it is stopped."""
        registry = Registry(self.store)
        project = registry.project_of(ref.name)
        target = Target(MODEL, str(ref))
        return self._one_of(
            MODEL, project, target, who, lambda: self._start_model(project, ref, registry, who)
        )

    def _one_of(
        self, kind: str, project: str, target: Target, who: str, start: Callable[[], Service]
    ) -> tuple[Service, bool]:
        with self._starting:
            running = self.listed((project,))
            for service in running:
                if service.kind == kind and service.target == target and service.process.alive():
                    self.touch(service)
                    return service, False
            if len(running) >= self.timing.per_project:
                raise QuotaExceeded(
                    f"project {project} has {len(running)} services running, the most this server runs"
                    " for one project: stop one (`phalanx tensorboard ls`, `phalanx notebook ls`) or let"
                    " an idle one stop"
                )
            service = self.add(start())
        log.info("service %s: %s of %s %s started by %s", service.id, kind, target.kind, target.id, who)
        return service, True

    def add(self, service: Service) -> Service:
        """List a started service (what ``tensorboard`` does with the one it started)."""
        with self._lock:
            self._services[service.id] = service
        return service

    def stop(self, service_id: str) -> Service:
        service = self.get(service_id)
        self._end(service)
        return service

    def _start_tensorboard(self, project: str, target: Target, who: str) -> Service:
        extras.require("tensorboard", "services", "a TensorBoard service")
        from phalanx.services.boards import Board  # why: the services extra (TensorBoard)

        service_id = secrets.token_hex(6)
        logs = self.home / "services" / service_id / "logs"
        logs.mkdir(parents=True)
        board = Board(self.store, target, logs)
        board.render()  # what is there already shows at once
        return self._spawn(
            Launch(service_id, TENSORBOARD, project, target, who, Role.viewer, board),
            lambda socket: [
                sys.executable,
                "-m",
                "phalanx.services.tensorboard",
                "--logdir",
                str(logs),
                "--socket",
                socket,
                "--path-prefix",
                f"/services/{service_id}",
                "--reload-seconds",
                str(self.timing.refresh_seconds),
            ],
            ro=(str(logs),),
        )

    def _start_notebook(self, project: str, inputs: Mapping[str, str], who: str) -> Service:
        extras.require("jupyterlab", "services", "a notebook service")
        service_id = secrets.token_hex(6)
        (self.home / "services" / service_id).mkdir(parents=True)
        work = self.home / "notebooks" / project  # the project's notebooks outlive each server of them
        isolation = self.isolation_for(project)
        if isolation is not None:
            box.make_own_folder(work, isolation)
        else:
            work.mkdir(parents=True, exist_ok=True)
        return self._spawn(
            Launch(service_id, NOTEBOOK, project, Target("project", project), who, Role.editor, None),
            lambda socket: [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                f"--ServerApp.sock={socket}",
                f"--ServerApp.base_url=/services/{service_id}/",
                f"--ServerApp.root_dir={work}",
                # who may reach it is the server's proxy's to check (the project's editors): its own
                # token, password and XSRF cookie would be the caller's credentials, never forwarded
                "--IdentityProvider.token=",
                "--ServerApp.password=",
                "--ServerApp.disable_check_xsrf=True",
                "--ServerApp.allow_remote_access=True",  # the proxy's Host is the server's name
                "--ServerApp.allow_root=True",  # unboxed, as a server that runs as root
            ],
            ro=tuple(inputs.values()),
            rw=(str(work),),
            env=dict(inputs),
        )

    def _start_model(
        self, project: str, ref: ModelRef, registry: Registry, who: str, service_id: str | None = None
    ) -> Service:
        extras.require("onnxruntime", "serve", "a served model")
        service_id = service_id or secrets.token_hex(6)
        models = self.home / "services" / service_id / "model"
        version = registry.resolve(ref)
        publish(models, version, registry.read_bytes(version))
        # what serves it again after a restart (``_sweep``); its stop removes the folder
        (models.parent / SERVED).write_text(json.dumps({"ref": str(ref), "who": who}))
        launch = Launch(service_id, MODEL, project, Target(MODEL, str(ref)), who, Role.viewer, None)

        def argv_for(socket: str) -> list[str]:
            return [
                sys.executable,
                "-m",
                "phalanx.serving.folder",
                "--folder",
                str(models),
                "--socket",
                socket,
                "--root-path",
                f"/services/{service_id}",
                "--ref",
                str(ref),
            ]

        def respawn() -> Service:
            return self._spawn(launch, argv_for, ro=(str(models),))

        def follow() -> None:
            if ref.alias is not None and (found := registry.resolve(ref)).version != published(models):
                publish(models, found, registry.read_bytes(found))
                log.info("service %s: %s moved, version %d handed over", service_id, ref, found.version)

        service = respawn()
        service.respawn, service.follow = respawn, follow
        return service

    def _spawn(
        self,
        launch: Launch,
        argv_for: Callable[[str], list[str]],
        ro: tuple[str, ...] = (),
        rw: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
    ) -> Service:
        """The service's process, in the project's box when the server boxes, listening on a socket
        in a folder of its own; returned once it listens (ServiceFailed if it does not)."""
        folder = self.home / "services" / launch.id
        # a short path: a Unix socket's path holds at most 107 bytes, a home's may be long
        listen = Path(tempfile.mkdtemp(prefix=f"{LISTEN_PREFIX}{launch.id}-"))
        (folder / LISTEN).write_text(str(listen))  # what a later server removes if this one is killed
        socket = listen / SOCKET
        own_home = listen / "home"  # its HOME (JupyterLab's runtime files): writable after the lock below
        # -P: nothing of its working folder is imported (a notebook folder's planted jupyterlab.py)
        argv = [sys.executable, "-P", *argv_for(str(socket))[1:]]
        isolation = self.isolation_for(launch.project)
        if isolation is not None:
            box.make_own_folder(listen, isolation)
            box.make_own_folder(own_home, isolation)
            layout = box.Layout(
                cwd=str(own_home),
                tmp=None,
                rw=(str(listen), *rw),
                ro=(*ro, PACKAGE_ROOT, *box.interpreter_trees()),
            )
            argv = box.box_argv(isolation, layout) + argv
            started = box.box_env(isolation, str(own_home))
        else:  # as the server, but with none of its environment (its tokens, its cloud keys)
            own_home.mkdir()
            started = {
                "PATH": os.environ.get("PATH", box.BOX_PATH),
                "HOME": str(own_home),
                "TMPDIR": str(own_home),
            }
            if setpriv := shutil.which(box.SETPRIV):  # ended with the server however it ends
                argv = [setpriv, "--pdeathsig", "SIGKILL", "--", *argv]
        started.update(box.inherited(), **(env or {}), PYTHONPATH=PACKAGE_ROOT, **{MARK: str(folder)})
        with open(folder / LOG, "ab") as out:
            assert self._spawner is not None, "Services.start() first"
            popen = self._spawner.submit(
                subprocess.Popen,
                argv,
                env=started,
                cwd=str(own_home),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            ).result()
        service = Service(
            id=launch.id,
            kind=launch.kind,
            project=launch.project,
            target=launch.target,
            folder=folder,
            socket=socket,
            process=Spawned(popen),
            board=launch.board,
            started_by=launch.who,
            role=launch.role,
        )
        try:
            self._await_listening(service)
        except BaseException:
            self._end(service)
            raise
        if isolation is not None:  # its socket can no longer be replaced by what runs in its box
            os.chown(listen, os.getuid(), os.getgid())
            os.chmod(listen, 0o755)
        return service

    def _await_listening(self, service: Service) -> None:
        """Until the process listens on its socket; ServiceFailed when it ends or takes too long."""
        deadline = time.monotonic() + self.timing.start_seconds
        while not service.socket.exists():
            if not service.process.alive():
                raise ServiceFailed(
                    f"the {service.kind} ended (status {service.process.status()}) before it listened: "
                    f"{tail(service.folder / LOG)}"
                )
            if time.monotonic() > deadline:
                raise ServiceFailed(
                    f"the {service.kind} did not listen within {self.timing.start_seconds:.0f} s"
                )
            if self._stop.wait(0.05):
                raise ServiceFailed("the server is stopping")

    def _end(self, service: Service, keep: bool = False) -> None:
        """Its process ended and its folders gone (``keep``: its own folder stays, for the next
        server), then it leaves the list (listed: still there)."""
        service.process.end()
        if service.board is not None:
            service.board.close()
        shutil.rmtree(service.socket.parent, ignore_errors=True)
        if not keep:
            shutil.rmtree(service.folder, ignore_errors=True)
        with self._lock:
            self._services.pop(service.id, None)
        log.info("service %s stopped", service.id)

    def _loop(self) -> None:
        while not self._stop.wait(self.timing.refresh_seconds):
            for service in self.listed():
                self._tend(service)

    def _keep_serving(self, service: Service) -> None:
        """A served model: never stopped for idleness; started again when its process died (a
        failed start ends it, logged); the version its alias names now handed over."""
        assert service.respawn is not None
        if not service.process.alive() and not self._stop.is_set():
            log.warning(
                "service %s: its process ended (%s); starting it again", service.id, service.process.status()
            )
            shutil.rmtree(service.socket.parent, ignore_errors=True)
            try:
                again = service.respawn()
            except Exception:
                log.exception("service %s: it could not be started again; it is stopped", service.id)
                self._end(service)
                return
            again.respawn, again.follow, again.restarts = (
                service.respawn,
                service.follow,
                service.restarts + 1,
            )
            again.started_at, again.last_used = service.started_at, service.last_used
            self.add(again)
            service = again
        if service.follow is not None:
            try:
                service.follow()
            except Exception:  # the store down, a bad file: it keeps serving what it has
                log.exception("service %s: following its alias failed; trying again", service.id)

    def _tend(self, service: Service) -> None:
        """One refresher pass over ``service``: a served model's process started again when it died
        and its alias followed; another forgotten when its process died, stopped when idle or when
        its experiment is deleted, else its board brought up to date."""
        if service.respawn is not None:
            self._keep_serving(service)
        elif not service.process.alive():
            log.warning(
                "service %s: its process ended (%s); asking again starts a new one",
                service.id,
                service.process.status(),
            )
            self._end(service)
        elif time.monotonic() - service.last_used > self.timing.idle_seconds:
            log.info("service %s: idle for %.0f s, stopped", service.id, self.timing.idle_seconds)
            self._end(service)
        elif service.board is not None:
            try:
                service.board.render()
            except NotFound:  # the experiment (or group) it showed was deleted: nothing left to show
                log.info("service %s: its %s was deleted, stopped", service.id, service.target.kind)
                self._end(service)
            except Exception:  # a store hiccup: the next pass renders what this one missed
                log.exception("service %s: rendering its board failed; trying again", service.id)
