"""The services a server runs for its projects (docs/services.md): TensorBoard boards and notebook
servers.

``Services`` keeps one TensorBoard per target object (an experiment, a group, a project) and one
notebook server (JupyterLab) per project: asked again, it hands back the one that runs. Each is a
process in the project's box (the same account, namespaces and allow-listed environment as the
project's experiments, phalanx.machine.box) that listens on a Unix socket in a folder of that
account's, never on a TCP port: it is reached only through the server's ``/services/ID/`` proxy
(phalanx.server.proxy), under the project's roles (a board: its viewers; a notebook: its editors).

A served model is one address in front of one or more processes (its replicas), which take turns
at its requests. Processes are started by phalanx.server.service_spawn.

One refresher thread renders what experiments reported since its last pass into each board's
folder (phalanx.services.boards), stops a service nobody reached in ``idle_seconds``, forgets
one whose process died (asking again starts a new one) and starts a served model's dead process
again. The server's end stops them all; a box ends
with the server anyway (bubblewrap's ``--die-with-parent``), and a notebook's kernels end with
their notebook server (they watch their parent), so nothing outlives it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phalanx import extras
from phalanx.domain import Resources
from phalanx.errors import NotFound, QuotaExceeded
from phalanx.machine import box
from phalanx.machine.box import Isolation
from phalanx.machine.ledger import Ledger, ledger_path
from phalanx.queue import local_limits
from phalanx.registry.service import Registry
from phalanx.sdkcopy import sdk_path
from phalanx.server.notebook_env import Kernel, build_environment, kernel_in, unpack_code
from phalanx.server.service_record import MODEL, NOTEBOOK, SERVED, TENSORBOARD, Service
from phalanx.server.service_spawn import (
    LISTEN,
    Instance,
    Launch,
    Recipe,
    Spawner,
    end_instance,
    listened_in,
)
from phalanx.services.kernels import NO_NATIVE_KERNEL
from phalanx.services.seats import (
    check_fits,
    give_back,
    resources_json,
    resources_of,
    sweep_cgroups,
    take_seat,
)
from phalanx.services.targets import Target
from phalanx.serving.folder import publish, published
from phalanx.share import Limit
from phalanx.spec.model import Build
from phalanx.store.accounts import Role
from phalanx.store.base import LocalStore
from phalanx.store.registry_records import ModelRef, parse_ref

log = logging.getLogger(__name__)


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
        self._spawner: Spawner | None = None
        self._ledger = Ledger(ledger_path(home))  # the machine's, shared with the server's experiments

    def start(self) -> Services:
        """Start the refresher (again after ``close``: an app's lifespan may run more than once),
        after removing what an ended server's services left and serving its models again."""
        if self._thread is None or not self._thread.is_alive():
            self._stop = threading.Event()
            stop = self._stop
            self._spawner = Spawner(self.home, self.isolation_for, self.timing.start_seconds, stop.wait)
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
            self._spawner.close()

    def _sweep(self) -> None:
        """What the services of a server that ended (stopped or killed) left, before any runs: the
        folder each listened in (named in ``LISTEN``; its process ended with that server) and its
        own folder, except a served model's, which is served again under its id (``SERVED``: an
        answered serve lasts until it is stopped, across restarts)."""
        root = self.home / "services"
        sweep_cgroups(self._ledger)  # the cgroups of a killed server's seats, now empty
        for folder in sorted(root.iterdir()) if root.is_dir() else ():
            for listen in listened_in(folder):
                shutil.rmtree(listen, ignore_errors=True)
            with contextlib.suppress(OSError):
                (folder / LISTEN).unlink()
            try:
                served = json.loads((folder / SERVED).read_text())
            except (OSError, ValueError):
                shutil.rmtree(folder, ignore_errors=True)
                continue
            self._serve_again(folder.name, served)

    def _serve_again(self, service_id: str, served: Mapping[str, Any]) -> None:
        """The served model of ``served`` (its ref, who served it, its replicas) started again under
        its id; a model that cannot be (deleted since, a broken file) is logged and its folder
        removed."""
        try:
            ref = parse_ref(served["ref"])
            registry = Registry(self.store)
            project, replicas = registry.project_of(ref.name), int(served.get("replicas", 1))
            resources = resources_of(served.get("resources"))
            self.add(
                self._start_model(project, ref, registry, served["who"], replicas, service_id, resources)
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

    def serving(self, name: str) -> dict[int, list[str]]:
        """The versions of registered model ``name`` its running services hand over now: version ->
        the ids of the services serving it (what `phalanx models rm` must not pull from under one)."""
        found: dict[int, list[str]] = {}
        for service in self.listed():
            if service.kind == MODEL and parse_ref(service.target.id).name == name:
                version = published(service.folder / "model")
                if version is not None:
                    found.setdefault(version, []).append(service.id)
        return found

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

    def notebook(
        self,
        project: str,
        inputs: Mapping[str, str],
        who: str,
        python: Path | None = None,
        resources: Resources | None = None,
        code: bytes | None = None,
    ) -> tuple[Service, bool]:
        """The project's notebook server, started unless one runs; (it, started). ``inputs``: the
        environment that names its inputs' folders (``PHALANX_INPUT_NAME``: a path), which its
        kernels inherit and its box may read; ``python``: its kernels' (a build environment's; None:
        Phalanx's own); ``resources``: what it takes of the machine's ledger while it runs (Conflict
        when there is no room now); ``code``: a bundle of the submitter's folder, unpacked into the
        project's notebook folder's ``code/``. One that runs keeps what it started with."""
        target = Target("project", project)
        return self._one_of(
            NOTEBOOK,
            project,
            target,
            who,
            lambda: self._start_notebook(project, inputs, who, python, resources, code),
        )

    def running(self, kind: str, target: Target) -> Service | None:
        """The service of ``kind`` for ``target`` that runs, if one does."""
        found = (s for s in self.listed() if s.kind == kind and s.target == target)
        return next((s for s in found if s.alive()), None)

    def check_fits(self, project: str, resources: Resources | None, label: str) -> None:
        """UsageError now when ``resources`` could never be held on this machine (before a build)."""
        check_fits(resources, project, label, self._quotas())

    def environment(self, project: str, build: Build, requirements: str | None) -> Path:
        """The python of a notebook file's ``build`` (``requirements``: its requirements file's
        text), built as ``project``'s account on first use and cached as an experiment's."""
        return build_environment(self.home, build, requirements, self.isolation_for(project))

    def model(
        self, ref: ModelRef, who: str, replicas: int = 1, resources: Resources | None = None
    ) -> tuple[Service, bool]:
        """``ref`` (``NAME@alias``, ``NAME@N``, ``NAME``: its latest) served in its model's project
        by ``replicas`` processes behind its one address, started unless it is (one that serves is
        handed back as it is): the version handed over as files, a moved alias followed by the
        refresher, and each process started again whenever it dies, until it is stopped.
        ``resources``: each replica's, taken in the machine's ledger while it serves (the replicas
        share what they hold together)."""
        registry = Registry(self.store)
        project = registry.project_of(ref.name)
        target = Target(MODEL, str(ref))
        return self._one_of(
            MODEL,
            project,
            target,
            who,
            lambda: self._start_model(project, ref, registry, who, replicas, resources=resources),
            processes=replicas,
        )

    def _one_of(
        self,
        kind: str,
        project: str,
        target: Target,
        who: str,
        start: Callable[[], Service],
        processes: int = 1,
    ) -> tuple[Service, bool]:
        """The service of ``target`` that runs (a served model's too while its processes are being
        started again), else a new one of ``processes`` processes from ``start``, within the
        project's limit on processes."""
        with self._starting:
            running = self.listed((project,))
            for service in running:
                kept = service.alive() or service.respawn is not None  # a model is started again
                if service.kind == kind and service.target == target and kept:
                    self.touch(service)
                    return service, False
            held = sum(len(s.instances) for s in running)
            if held + processes > self.timing.per_project:
                raise QuotaExceeded(
                    f"project {project} has {held} service processes running and this needs {processes}"
                    f" more; the most this server runs for one project is {self.timing.per_project}:"
                    " stop a service (`phalanx tensorboard ls`, `phalanx notebook ls`) or let an idle one"
                    " stop"
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
        launch = Launch(service_id, TENSORBOARD, project, target, who, Role.viewer, board)
        return self._started(
            launch,
            Recipe(
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
            ),
        )

    def _start_notebook(
        self,
        project: str,
        inputs: Mapping[str, str],
        who: str,
        python: Path | None,
        resources: Resources | None,
        code: bytes | None = None,
    ) -> Service:
        extras.require("jupyterlab", "services", "a notebook service")
        service_id = secrets.token_hex(6)
        label = f"notebook of project {project}"
        seat = take_seat(self._ledger, f"notebook-{service_id}", resources, project, label, self._quotas())
        try:
            kernel, work = self._notebook_folders(service_id, project, python, code)
        except BaseException:  # nothing of it is left: its seat given back, its folder gone
            give_back(self._ledger, seat)
            shutil.rmtree(self.home / "services" / service_id, ignore_errors=True)
            raise
        service = self._started(
            Launch(service_id, NOTEBOOK, project, Target("project", project), who, Role.editor, None, seat),
            Recipe(
                lambda socket: [
                    sys.executable,
                    "-m",
                    "jupyterlab",
                    *([NO_NATIVE_KERNEL] if kernel is not None else []),
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
                ro=(*inputs.values(), *(kernel.reads if kernel is not None else ())),
                rw=(str(work),),
                env={**inputs, **({"JUPYTER_PATH": str(kernel.data)} if kernel is not None else {})},
            ),
        )
        service.environment = kernel.label if kernel is not None else None
        return service

    def _notebook_folders(
        self, service_id: str, project: str, python: Path | None, code: bytes | None
    ) -> tuple[Kernel | None, Path]:
        """A notebook's folder with its kernel's spec (``python``: a build's), and the project's
        notebook folder, which outlives each notebook server of it (the project's account's), with
        ``code`` (a bundle) unpacked into its ``code/``."""
        folder = self.home / "services" / service_id
        folder.mkdir(parents=True)
        kernel = kernel_in(folder, python, sdk_path(self.home)) if python is not None else None
        work = self.home / "notebooks" / project
        isolation = self.isolation_for(project)
        if isolation is not None:
            box.make_own_folder(work, isolation)
        else:
            work.mkdir(parents=True, exist_ok=True)
        if code is not None:
            unpack_code(code, work, isolation)
        return kernel, work

    def _start_model(
        self,
        project: str,
        ref: ModelRef,
        registry: Registry,
        who: str,
        replicas: int = 1,
        service_id: str | None = None,
        resources: Resources | None = None,
    ) -> Service:
        extras.require("onnxruntime", "serve", "a served model")
        service_id = service_id or secrets.token_hex(6)
        label = f"served model {ref}"
        key = f"model-{service_id}"
        seat = take_seat(self._ledger, key, resources, project, label, self._quotas(), copies=replicas)
        try:
            models = self.home / "services" / service_id / "model"
            version = registry.resolve(ref)
            publish(models, version, registry.read_bytes(version))
        except BaseException:
            give_back(self._ledger, seat)
            raise
        # what serves it again after a restart (``_sweep``); its stop removes the folder
        served = {"ref": str(ref), "who": who, "replicas": replicas, "resources": resources_json(resources)}
        (models.parent / SERVED).write_text(json.dumps(served))
        launch = Launch(service_id, MODEL, project, Target(MODEL, str(ref)), who, Role.viewer, None, seat)

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

        recipe = Recipe(argv_for, ro=(str(models),))

        def respawn(_: int) -> Instance:  # every replica alike: they read the same folder
            return self._spawner_now().spawn(launch, recipe)

        def follow() -> None:
            if ref.alias is not None and (found := registry.resolve(ref)).version != published(models):
                publish(models, found, registry.read_bytes(found))
                log.info("service %s: %s moved, version %d handed over", service_id, ref, found.version)

        service = self._started(launch, recipe, count=replicas)
        service.respawn, service.follow = respawn, follow
        return service

    def _listed(self, service: Service) -> bool:
        with self._lock:
            return self._services.get(service.id) is service

    def _spawner_now(self) -> Spawner:
        assert self._spawner is not None, "Services.start() first"
        return self._spawner

    def _quotas(self) -> Mapping[str, Limit]:
        return local_limits(self.store)

    def _started(self, launch: Launch, recipe: Recipe, count: int = 1) -> Service:
        """The service of ``launch`` with ``count`` instances of ``recipe``, each listening; if one
        does not start, nothing of it is left (the others ended, its folder gone) and ServiceFailed
        says why."""
        service = Service(
            id=launch.id,
            kind=launch.kind,
            project=launch.project,
            target=launch.target,
            folder=self.home / "services" / launch.id,
            instances=[],
            board=launch.board,
            started_by=launch.who,
            role=launch.role,
            seat=launch.seat,
        )
        spawner = self._spawner_now()
        try:  # all started at once, then each awaited: N replicas start in about the time of one
            for _ in range(count):
                service.instances.append(spawner.start(launch, recipe))
            for instance in service.instances:
                spawner.await_listening(instance, launch)
        except BaseException:
            self._end(service)
            raise
        return service

    def _end(self, service: Service, keep: bool = False) -> None:
        """Off the list first (a process started again meanwhile sees it gone and ends itself, see
        ``_keep_serving``), then its processes ended and its folders gone (``keep``: its own folder
        stays, for the next server)."""
        with self._lock:
            if self._services.get(service.id) is service:
                del self._services[service.id]
        for instance in list(service.instances):
            end_instance(instance)
        if service.board is not None:
            service.board.close()
        give_back(self._ledger, service.seat)
        if not keep:
            shutil.rmtree(service.folder, ignore_errors=True)
        log.info("service %s stopped", service.id)

    def _loop(self) -> None:
        while not self._stop.wait(self.timing.refresh_seconds):
            for service in self.listed():
                self._tend(service)

    def _keep_serving(self, service: Service) -> None:
        """A served model: never stopped for idleness; each of its processes started again when it
        died, while the others serve (a failed start ends the service, logged); the version its
        alias names now handed over."""
        assert service.respawn is not None
        for slot, instance in enumerate(service.instances):
            if instance.process.alive() or self._stop.is_set():
                continue
            log.warning(
                "service %s: its process %d ended (%s); starting it again",
                service.id,
                slot,
                instance.process.status(),
            )
            end_instance(instance)
            try:
                again = service.respawn(slot)
            except Exception:
                if self._stop.is_set() or not self._listed(service):
                    return  # the server stops (the next one serves it), or it was stopped meanwhile
                if service.alive():
                    log.exception(
                        "service %s: process %d could not be started again; the others serve,"
                        " it is tried again on the next pass",
                        service.id,
                        slot,
                    )
                    continue
                log.exception("service %s: it could not be started again; it is stopped", service.id)
                self._end(service)
                return
            with self._lock:  # stopped while it started: the new process goes too
                listed = self._services.get(service.id) is service
                if listed:
                    service.instances[slot] = again
                    service.restarts += 1
            if not listed:
                end_instance(again)
                return
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
        elif not service.alive():
            log.warning(
                "service %s: its process ended (%s); asking again starts a new one",
                service.id,
                service.instances[0].process.status(),
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
