"""The Ray engine: a Plan becomes one placement group (a bundle per replica) and an actor per bundle.

``dry_run`` renders the request (``ray_render``: bundles, strategy, each actor's processes and
environment) without touching Ray. ``submit`` stores the code bundle on the cluster's Phalanx
server, creates the placement group and the actors (each scheduled into its bundle), and returns;
Ray places the group all-or-nothing. ``describe`` maps the group's state through ``GROUP_STATES``
(PENDING: the gang waits, with the reason in the cluster's numbers) and, once it is placed, starts
every actor with the node addresses of all bundles (the wiring's hosts) and maps each actor's phase
through ``ACTOR_PHASES``. ``logs`` reads an actor's console file on its node; ``cancel`` stops the
replicas (their reapers stop each process tree), lets the log readers take the last lines, then
kills the actors and removes the group.

The placement group and the actors fate-share with the process that created them (the supervisor,
Ray's "driver"): if it dies, Ray removes the group and kills the actors, and each actor's death takes
its replica's process tree with it (``ray_actor``). So nothing of an experiment outlives it, even
when its supervisor is killed. Ray is imported only here, inside the functions that need it (an
optional extra, ``phalanx[ray]``).

The handle is ``<group>/<replica>,<replica>...``: the group's name (``phalanx-<id>-<attempt>``, in
Ray namespace ``phalanx``) and the replicas, whose actors are ``<group>-<replica>``, so another
process (``phalanx stop``) finds them by name.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from phalanx import knobs
from phalanx.backends import kube_code, ray_actor
from phalanx.backends.base import (
    DryRun,
    JobStatus,
    LaunchContext,
    ReplicaStatus,
    expect_dry_run,
    job_status,
)
from phalanx.backends.kube_objects import LogReaders
from phalanx.backends.local.units import exit_reason
from phalanx.backends.ray_render import (
    NAMESPACE,
    RayDryRun,
    code_url,
    render,
    replica_env,
    strategy,
    unfit_reason,
)
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, ReplicaState
from phalanx.errors import BackendUnavailable, NotFound, Problem, SpecError, UsageError
from phalanx.extras import require
from phalanx.plan import Plan
from phalanx.tokens import experiment_token

log = logging.getLogger(__name__)

# Placement group state (ray.util.placement_group_table) -> experiment status. Anything else: UNKNOWN.
GROUP_STATES: dict[str, ExperimentStatus] = {
    "PENDING": ExperimentStatus.PENDING,  # not every bundle fits yet: the gang waits, all or nothing
    "PREPARED": ExperimentStatus.STARTING,  # bundles reserved, being committed on their nodes
    "CREATED": ExperimentStatus.RUNNING,  # every bundle placed (the actors' phases say more)
    "RESCHEDULING": ExperimentStatus.PENDING,  # a node with a bundle died; Ray places it again
    "REMOVED": ExperimentStatus.STOPPED,  # removed (cancel, or its creator ended)
}
# Actor phase (ray_actor.ReplicaActor.report) -> replica state; "ended" is decided by the exit.
ACTOR_PHASES: dict[str, ReplicaState] = {
    "placed": ReplicaState.STARTING,  # its bundle is held; it waits for the gang's addresses
    "preparing": ReplicaState.STARTING,  # fetching the code, building the node's environment
    "running": ReplicaState.RUNNING,  # its reaper runs the replica's processes
}
READ_SECONDS = 5.0  # a log read that takes longer is tried again (the actor may not exist yet)
CALL_SECONDS = 60.0  # how long one call to an actor may take before Ray is said to be unreachable
GRACE_SECONDS = 5.0  # SIGTERM -> SIGKILL, as the local engine's reaper
_CONNECT = threading.Lock()


def _ray() -> Any:
    return require("ray", "ray", "a Ray cluster (phalanx run --cluster NAME)")


def attempt_of(context: LaunchContext) -> str:
    return context.tracking_env.get("PHALANX_ATTEMPT") or "0"


def replica_status(name: str, report: Mapping[str, Any], host: str | None) -> ReplicaStatus:
    """One replica's state from its actor's report (phase, then the reaper's status at the end)."""
    phase = str(report.get("phase"))
    started = report.get("started_at")
    if phase != "ended":
        state = ACTOR_PHASES.get(phase, ReplicaState.UNKNOWN)
        # no pid: it names a process of another machine, which the supervisor must not sample
        return ReplicaStatus(name, state, host=host, started_at=started)
    finished = report.get("failed_at") or report.get("ended_at") or time.time()
    if report.get("stopped") or report.get("reason") == "stopped":
        return ReplicaStatus(name, ReplicaState.STOPPED, host=host, reason="stopped", finished_at=finished)
    sig = report.get("signal")
    code = -int(sig) if sig else int(report.get("exit_code") or 0)
    if code == 0:
        return ReplicaStatus(name, ReplicaState.SUCCEEDED, host=host, exit_code=0, finished_at=finished)
    reason = report.get("reason") or exit_reason(code)
    return ReplicaStatus(
        name, ReplicaState.FAILED, host=host, exit_code=code, reason=reason, finished_at=finished
    )


@dataclass
class _Job:
    """What this process knows of one submitted group (another process rebuilds it by name)."""

    group: Any  # ray.util.placement_group.PlacementGroup
    actors: dict[str, Any]  # replica -> actor handle
    bundles: tuple[Mapping[str, float | int], ...] = ()
    strategy: str = "PACK"
    hosts: list[str] = field(default_factory=list)  # bundle i's node address, once started
    last: dict[str, ReplicaStatus] = field(default_factory=dict)
    ended: dict[str, dict[str, Any]] = field(default_factory=dict)  # replica -> its last report
    cancelled: bool = False
    mine: bool = False  # submitted by this process, which starts its actors once placed
    code: tuple[str, bytes] | None = None  # the bundle's URL and bytes, stored at the start
    failed_start: str | None = None  # why the actors could not be started (the bundle not stored)


class RayBackend:
    """Runs a Plan on a Ray cluster (``phalanx cluster add NAME --kind ray --address HEAD:PORT``)."""

    name = "ray"
    restarts_itself = False

    def __init__(self, settings: Settings | None = None, cluster: Cluster | None = None) -> None:
        self.settings = settings or Settings()
        self.cluster = cluster or Cluster(name="ray", kind="ray")
        self._jobs: dict[str, _Job] = {}
        self._readers = LogReaders()

    # -- dry run --------------------------------------------------------------------------------
    def _server(self) -> str:
        if not self.cluster.server_url or not self.cluster.address:
            raise SpecError(
                [
                    Problem(
                        f"Ray cluster {self.cluster.name} needs --address and --server-url: its nodes fetch "
                        "the code from that Phalanx server and report every metric to it; re-add it with "
                        f"`phalanx cluster add {self.cluster.name} --kind ray --address HEAD:6379 "
                        "--server-url http://SERVER:8000 --replace`"
                    )
                ]
            )
        return self.cluster.server_url.rstrip("/")

    def dry_run(self, plan: Plan, context: LaunchContext) -> DryRun:
        if context.isolation is not None:
            raise UsageError(
                f"Ray cluster {self.cluster.name} cannot run a server's boxed experiment: Ray runs every"
                " job as its own daemons' account, with their environment and files, so a job there"
                f" is not kept to project {context.isolation.project}'s account. Run it on this server"
                " (no cluster), or on a Slurm or Kubernetes cluster, which keep each project to its own"
                " identity (docs/security.md)"
            )
        server = self._server()
        exp = context.experiment_id
        token = None
        if self.settings.token:  # a token that writes this experiment only (docs/security.md)
            token = experiment_token(self.settings.token, exp)
        env = replica_env(plan, exp, context.tracking_env, server, token)
        group = f"phalanx-{exp}-{attempt_of(context)}"
        bundles, actors, build = render(
            plan, env, experiment_id=exp, group=group, server_url=server, workdir=context.workdir
        )
        return RayDryRun(
            backend=self.name,
            plan=plan,
            context=context,
            address=str(self.cluster.address),
            group=group,
            strategy=strategy(plan),
            bundles=bundles,
            actors=actors,
            code_url=code_url(server, exp),
            env_build=build,
            node_dir=self.cluster.node_dir,
        )

    # -- connecting -----------------------------------------------------------------------------
    def _connect(self) -> Any:
        """Ray, connected to this cluster as a driver (once per process)."""
        ray = _ray()
        with _CONNECT:
            if not ray.is_initialized():
                # ray.init sets its own SIGTERM handler (exit at once) in the main thread: the
                # supervisor's handler, which stops the experiment cleanly, is put back after it
                main = threading.current_thread() is threading.main_thread()
                previous = signal.getsignal(signal.SIGTERM) if main else None
                try:
                    ray.init(
                        address=self.cluster.address,
                        namespace=NAMESPACE,
                        log_to_driver=False,  # the replicas' console is read from their actors
                        logging_level=logging.WARNING,
                    )
                except Exception as exc:
                    raise BackendUnavailable(
                        f"cannot reach Ray cluster {self.cluster.name} at {self.cluster.address}: {exc}"
                    ) from exc
                finally:
                    if main:
                        signal.signal(signal.SIGTERM, previous)
                # the actor's class goes to the nodes by value: they need Ray, not Phalanx
                ray.cloudpickle.register_pickle_by_value(ray_actor)
        return ray

    # -- submit ---------------------------------------------------------------------------------
    def submit(self, dry_run: DryRun) -> str:
        dry = expect_dry_run(dry_run, RayDryRun, self.name)
        ray = self._connect()
        # packed now (a folder over the cap is refused before anything is created), stored on the
        # server once the group is placed: the experiment it is filed under is recorded by then
        data = kube_code.pack(dry.context.workdir, self.settings)
        sha = hashlib.sha256(data).hexdigest()
        handle = f"{dry.group}/{','.join(a.replica for a in dry.actors)}"
        self.cancel(handle)  # what a previous submit of the same attempt left, if anything
        from ray.util.scheduling_strategies import (  # the optional extra phalanx[ray]
            PlacementGroupSchedulingStrategy,
        )

        group = ray.util.placement_group(
            [dict(b) for b in dry.bundles], strategy=dry.strategy, name=dry.group
        )
        job = _Job(group, {}, dry.bundles, dry.strategy, mine=True, code=(dry.code_url, data))
        self._jobs[handle] = job
        remote = ray.remote(ray_actor.ReplicaActor)
        try:
            for actor in dry.actors:
                res = dict(actor.resources)
                job.actors[actor.replica] = remote.options(
                    name=actor.name,
                    namespace=NAMESPACE,
                    num_cpus=res.get("CPU", 0),
                    num_gpus=res.get("GPU", 0),
                    memory=res.get("memory"),
                    max_concurrency=4,  # read and report while stop waits for the replica
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=group, placement_group_bundle_index=actor.bundle_index
                    ),
                ).remote(self._order(dry, actor.replica, actor.processes, sha))
        except Exception as exc:
            self.cancel(handle)  # nothing half-created stays
            raise BackendUnavailable(f"creating the Ray actors of {dry.group} failed: {exc}") from exc
        log.info("submitted %s as Ray placement group %s", dry.context.experiment_id, dry.group)
        return handle

    def _order(self, dry: RayDryRun, replica: str, processes: Any, sha: str) -> dict[str, Any]:
        """What one actor is told: where the code is, its environment build, its processes."""
        plan_replica = next(r for r in dry.plan.replicas if r.name == replica)
        token = next((env.get("PHALANX_TOKEN") for _, env in processes), None)
        return {
            "experiment_id": dry.context.experiment_id,
            "group": dry.group,
            "replica": replica,
            "code_url": dry.code_url,
            "code_sha256": sha,
            "token": token,
            "env_build": dict(dry.env_build) if dry.env_build else None,
            "node_dir": dry.node_dir,
            "processes": [{"argv": list(argv), "env": dict(env)} for argv, env in processes],
            "memory_mib": plan_replica.resources.memory.limits,
            "grace": GRACE_SECONDS,
            "heartbeat": knobs.BUILD_HEARTBEAT.value(),  # a silent build's longest silence
        }

    # -- state ----------------------------------------------------------------------------------
    @staticmethod
    def _split(handle: str) -> tuple[str, list[str]]:
        group, sep, names = handle.partition("/")
        if not sep or not group.startswith("phalanx-") or not names:
            raise NotFound(f"{handle!r} is not a Ray handle (<placement group>/<replica>,...)")
        return group, names.split(",")

    def _job(self, handle: str) -> _Job | None:
        """This process's record of the job, or one rebuilt from Ray's names (None: Ray has none)."""
        job = self._jobs.get(handle)
        if job is not None:
            return job
        ray = self._connect()
        group_name, names = self._split(handle)
        try:
            group = ray.util.get_placement_group(group_name)
        except ValueError:
            group = None
        actors = {}
        for name in names:
            with contextlib.suppress(ValueError):
                actors[name] = ray.get_actor(f"{group_name}-{name}", namespace=NAMESPACE)
        if group is None and not actors:
            return None
        return _Job(group, actors)

    def describe(self, handle: str) -> JobStatus | None:
        job = self._job(handle)
        if job is None:
            return None
        _, names = self._split(handle)
        if job.cancelled:
            return self._final(job, names)
        ray = self._connect()
        table = ray.util.placement_group_table(job.group) if job.group is not None else {}
        native = str(table.get("state", "REMOVED"))
        status = GROUP_STATES.get(native, ExperimentStatus.UNKNOWN)
        if status is ExperimentStatus.PENDING:
            reason = unfit_reason(job.bundles, job.strategy, self._nodes(ray)) if job.bundles else native
            if native == "RESCHEDULING":
                reason = "a node holding one of its bundles died; Ray is placing it again"
            waiting = tuple(ReplicaStatus(n, ReplicaState.PENDING) for n in names)
            return JobStatus(ExperimentStatus.PENDING, waiting, reason)
        if status is ExperimentStatus.UNKNOWN:
            return JobStatus(status, (), f"Ray placement group state {native!r}")
        if status is ExperimentStatus.STOPPED:  # removed, and not by this engine's cancel
            job.cancelled = True
            final = self._final(job, names)
            if final.status is ExperimentStatus.STOPPED:
                final = replace(final, reason="its Ray placement group was removed")
            return final
        if native == "CREATED" and not job.hosts and job.mine and job.failed_start is None:
            self._start(ray, job, table)
        if job.failed_start is not None:
            failed = [ReplicaStatus(n, ReplicaState.FAILED, reason=job.failed_start) for n in names]
            return job_status(failed)
        replicas = [self._replica(ray, job, name) for name in names]
        job.last = {r.name: r for r in replicas}
        return job_status(replicas)

    @staticmethod
    def _nodes(ray: Any) -> list[Mapping[str, float]]:
        return [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]

    def _start(self, ray: Any, job: _Job, table: Mapping[str, Any]) -> None:
        """The group is placed: the code bundle is stored on the server, then every actor learns
        every bundle's node address and starts."""
        if job.code is not None:
            try:
                kube_code.put_bundle(*job.code, self.settings.token)
            except BackendUnavailable as exc:
                job.failed_start = str(exc)
                return
            job.code = None
        address = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
        placed = table.get("bundles_to_node_id", {})
        job.hosts = [address.get(placed.get(i, ""), "") for i in range(len(job.bundles))]
        for actor in job.actors.values():
            actor.start.remote(job.hosts)

    def _replica(self, ray: Any, job: _Job, name: str) -> ReplicaStatus:
        index = list(job.actors).index(name) if name in job.actors else -1
        host = job.hosts[index] if 0 <= index < len(job.hosts) else None
        if name in job.ended:
            return replica_status(name, job.ended[name], host)
        actor = job.actors.get(name)
        if actor is None:
            return ReplicaStatus(name, ReplicaState.STOPPED, reason="its Ray actor is gone")
        if job.mine and not job.hosts:
            return ReplicaStatus(name, ReplicaState.STARTING)  # placed, not started by us yet
        try:
            report = ray.get(actor.report.remote(), timeout=CALL_SECONDS)
        except ray.exceptions.GetTimeoutError as exc:
            raise BackendUnavailable(f"the Ray actor of {name} did not answer in {CALL_SECONDS:g} s") from exc
        except ray.exceptions.RayActorError as exc:
            # its actor (or its node) died before its replica's exit was known: that is a failure
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return ReplicaStatus(
                name,
                ReplicaState.FAILED,
                host=host,
                reason=f"lost its Ray actor ({why})",
                finished_at=time.time(),
            )
        if report.get("phase") == "ended":
            report = {"ended_at": time.time(), **report}
            job.ended[name] = report  # an actor that dies after this is not a failure
        return replica_status(name, report, host)

    @staticmethod
    def _final(job: _Job, names: list[str]) -> JobStatus:
        """After cancel: the replicas as they ended (one still running then was stopped)."""
        out = []
        for name in names:
            if name in job.ended:
                out.append(replica_status(name, job.ended[name], None))
                continue
            last = job.last.get(name)
            if last is not None and last.state.done:
                out.append(last)
            else:
                out.append(ReplicaStatus(name, ReplicaState.STOPPED, reason="stopped"))
        return job_status(out)

    # -- logs -----------------------------------------------------------------------------------
    def logs(self, handle: str, replica: str, follow: bool = False) -> Iterator[str]:
        """The replica's console from its actor; with follow, until the replica has ended."""
        job = self._job(handle)
        actor = job.actors.get(replica) if job is not None else None
        if job is None or actor is None:
            return
        ray = self._connect()
        self._readers.enter(handle)
        try:
            offset, pending = 0, b""
            while True:
                # asked before reading, so no line written before the end is missed; an actor not
                # created yet (its group waits) does not answer: nothing new, not done
                done = not follow or self._replica_done(ray, job, replica, actor)
                if done and job.mine and not job.hosts:
                    return  # its group was never placed: its actor never ran, so it wrote nothing
                try:
                    asking = job.hosts or not job.mine
                    data = ray.get(actor.read.remote(offset), timeout=READ_SECONDS) if asking else b""
                except ray.exceptions.GetTimeoutError:
                    data = b""
                except ray.exceptions.RayActorError:
                    data, done = b"", True
                offset += len(data)
                lines = (pending + data).split(b"\n")
                pending = lines.pop()
                for line in lines:
                    yield line.decode("utf-8", "replace")
                if data:
                    continue
                if done:
                    if pending:
                        yield pending.decode("utf-8", "replace")
                    return
                time.sleep(0.2)
        finally:
            self._readers.leave(handle)

    def _replica_done(self, ray: Any, job: _Job, replica: str, actor: Any) -> bool:
        if replica in job.ended or job.cancelled:
            return True
        if not job.hosts and job.mine:
            return False  # this engine starts it once its group is placed: nothing to ask yet
        try:
            report = ray.get(actor.report.remote(), timeout=READ_SECONDS)
        except ray.exceptions.GetTimeoutError:
            return False
        except ray.exceptions.RayActorError:
            return True
        return bool(report.get("phase") == "ended")

    def discard_logs(self, handle: str) -> None:
        """Nothing to remove here: each console lives on its node and goes with its actor (cancel)."""

    def refuse_if_it_can_never_run(self, dry_run: DryRun) -> None:
        """Nothing to ask before the job: Ray places its bundles when it runs."""

    # -- cancel ---------------------------------------------------------------------------------
    @staticmethod
    def _placed(ray: Any, job: _Job) -> bool:
        """Whether the group's bundles are placed (its actors exist and answer)."""
        if job.hosts:
            return True
        if job.group is None:
            return bool(job.actors)
        with contextlib.suppress(Exception):
            return bool(ray.util.placement_group_table(job.group).get("state") == "CREATED")
        return False

    def cancel(self, handle: str) -> None:
        """Stop every replica (its reaper stops the process tree), let the log readers take the
        last lines, then kill the actors and remove the placement group. Idempotent."""
        job = self._job(handle)
        if job is None or (job.cancelled and not job.actors and job.group is None):
            return
        ray = self._connect()
        # a group still waiting has no replica to stop nor files to clean, only actors to kill: its
        # actors never run, so a call to one would only wait out its time-out
        placed = self._placed(ray, job)
        if placed:
            calls = {actor.stop.remote(GRACE_SECONDS): name for name, actor in job.actors.items()}
            done = (
                ray.wait(list(calls), num_returns=len(calls), timeout=GRACE_SECONDS + 20)[0] if calls else []
            )
            for ref in done:
                with contextlib.suppress(ray.exceptions.RayError):
                    report = ray.get(ref)
                    if report.get("phase") == "ended" and report.get("started_at") is not None:
                        job.ended.setdefault(calls[ref], {"ended_at": time.time(), **report})
        job.cancelled = True
        self._readers.wait_closed(handle)
        if placed:
            cleanups = [actor.cleanup.remote() for actor in job.actors.values()]
            with contextlib.suppress(ray.exceptions.RayError, TimeoutError):
                ray.get(cleanups, timeout=30)
        for actor in job.actors.values():
            with contextlib.suppress(ray.exceptions.RayError, ValueError):
                ray.kill(actor, no_restart=True)
        if job.group is not None:
            with contextlib.suppress(Exception):  # already removed with its creator: nothing to do
                ray.util.remove_placement_group(job.group)
        job.actors, job.group = {}, None


def create(cluster: Cluster | None = None, settings: Settings | None = None) -> RayBackend:
    """The registry's entry point: a Ray backend for a named cluster."""
    return RayBackend(settings, cluster)
