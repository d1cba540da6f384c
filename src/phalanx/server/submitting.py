"""Running a submitted experiment on the server's own machine.

The server validates the experiment file with the CLI's loader (a SpecError is the CLI's
`FILE:LINE:COL: path: message` problems, answered 422), keeps the code bundle once by its sha256,
unpacks it into a working folder of its own per experiment (``<home>/server/work/<id>``) and starts
it through ``Runner.submit``: a detached supervisor in its own session, on the same ledger and queue
as a `phalanx run` on this machine. The server never supervises training itself, so a server that
stops or restarts leaves every experiment it started running.

Where it runs is the submit's *target*: ``local`` (this machine) or a cluster registered in the
server's home (``clusters.toml``, `phalanx cluster add` there), which the supervisor drives exactly as
`phalanx run --cluster NAME` would.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from phalanx.bundles import BundleStore, digest, unpack
from phalanx.config import Settings
from phalanx.errors import PhalanxError, QuotaExceeded, UsageError
from phalanx.share import DEFAULT_PROJECT, LOCAL, TOO_MANY_WAITING
from phalanx.store.base import Store

log = logging.getLogger(__name__)

_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")  # printable ASCII, no spaces


def targets(settings: Settings) -> list[dict[str, str]]:
    """Where a submit may run: this machine, then the clusters registered in the server's home,
    by name and kind only (a cluster's paths and contexts are the server's business)."""
    from phalanx.clusters import load_clusters

    clusters = load_clusters(settings.home)
    return [{"name": LOCAL, "kind": LOCAL}] + [
        {"name": name, "kind": clusters[name].kind} for name in sorted(clusters) if name != LOCAL
    ]


def cluster_of(settings: Settings, target: str) -> str | None:
    """The cluster a target names (None: this machine); UsageError (400) naming the registered ones."""
    known = [t["name"] for t in targets(settings)]
    if target == LOCAL:
        return None
    if target not in known:
        raise UsageError(
            f"target {target!r}: no such compute target on this server; the registered ones are "
            f"{', '.join(known)} (an admin adds a cluster with `phalanx cluster add` on the server's machine)"
        )
    return target


@dataclass(frozen=True)
class SubmitRequest:
    file_name: str
    file_text: str
    params: Mapping[str, Any]
    priority: int
    bundle: bytes
    idempotency_key: str | None = None
    target: str = LOCAL


@dataclass(frozen=True)
class SubmitResult:
    experiment_id: str
    bundle_sha256: str
    created: bool  # False: an earlier submit with the same idempotency key made it
    kind: str = "experiment"  # or "group": the id is a group's (a `kind: group` file)


def parse_params(text: str | None) -> dict[str, Any]:
    """The ``params`` form field: a JSON object of name -> value (what `--param` parsed into)."""
    if not text:
        return {}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UsageError(f'params: not JSON ({exc}); send an object such as {{"lr": 0.1}}') from None
    if not isinstance(doc, dict):
        raise UsageError('params: expected a JSON object such as {"lr": 0.1}')
    return doc


def check_file_name(name: str) -> str:
    """A plain relative path inside the bundle (the file's name in the submitter's folder)."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name or "\0" in name:
        raise UsageError(f"file_name {name!r}: give the experiment file's path relative to its folder")
    return path.as_posix()


def submit(
    store: Store,
    settings: Settings,
    request: SubmitRequest,
    authorize: Callable[[str], None] | None = None,
) -> SubmitResult:
    """Validate, keep the bundle, reserve the idempotency key, unpack and start. SpecError (422)
    for an invalid file, UsageError (400) for a malformed request; on any failure to start, the key
    is released and the working folder removed. ``authorize`` is called with the experiment's
    project before anything is kept (it raises when the submitter may not submit there)."""
    from phalanx.queue import check_priority
    from phalanx.spec.loader import load_spec_text
    from phalanx.store import submissions

    name = check_file_name(request.file_name)
    key = request.idempotency_key
    if key is not None and not _KEY.match(key):
        raise UsageError("Idempotency-Key: 1 to 200 printable ASCII characters without spaces")
    check_priority(request.priority, "priority")
    cluster = cluster_of(settings, request.target)
    submissions.check_available(store)
    sha = digest(request.bundle)
    if key is not None:  # a retry: answered before anything is validated or unpacked again
        done = submissions.by_key(store, key)
        if done is not None:
            return SubmitResult(done.experiment_id, done.bundle_sha256, created=False)
    from phalanx.spec.group import is_group_text

    if is_group_text(request.file_text, name):
        return _submit_group(store, settings, request, name, sha, authorize, cluster)
    spec = load_spec_text(request.file_text, name, params=request.params)
    if authorize is not None:
        authorize(spec.project or "default")
    if cluster is None:  # quotas hold on this machine's queue; a cluster schedules for itself
        check_max_waiting(store, settings, spec.project or DEFAULT_PROJECT)
    BundleStore(settings.home / "server" / "bundles").put(request.bundle)
    exp_id = uuid.uuid4().hex[:12]
    winner = submissions.reserve(store, exp_id, key, sha)
    if winner != exp_id:
        return SubmitResult(winner, sha, created=False)
    work = settings.home / "server" / "work" / exp_id
    try:
        _start(settings, spec, request, name, work, exp_id, cluster)
    except BaseException:
        submissions.release(store, exp_id)
        shutil.rmtree(work, ignore_errors=True)
        raise
    return SubmitResult(exp_id, sha, created=True)


def _kind_of(store: Store, submitted_id: str) -> str:
    """What a submission's id names: a group's or an experiment's (both are 12 hex digits)."""
    from phalanx.errors import NotFound
    from phalanx.store.base import group_store

    try:
        group_store(store).get_group(submitted_id)
    except NotFound:
        return "experiment"
    return "group"


def _submit_group(
    store: Store,
    settings: Settings,
    request: SubmitRequest,
    name: str,
    sha: str,
    authorize: Callable[[str], None] | None = None,
    cluster: str | None = None,
) -> SubmitResult:
    """A `kind: group` file: validated and recorded as `phalanx group run` does, run from the
    unpacked bundle by a controller in its own process (``groups.launching.GroupLauncher``, as
    `phalanx group run --detach`) that a restarted server adopts (``groups.detached``).
    Idempotent as an experiment's submit (the key names the group)."""
    from phalanx.extras import require
    from phalanx.groups import detached
    from phalanx.groups.launching import GroupLauncher, GroupOptions
    from phalanx.spec.group import load_group_text
    from phalanx.store import submissions
    from phalanx.store.base import group_store

    group = load_group_text(request.file_text, name, params=request.params)
    if authorize is not None:
        authorize(group.base.project or DEFAULT_PROJECT)
    require("optuna", "search", "a group on the server")
    BundleStore(settings.home / "server" / "bundles").put(request.bundle)
    work = settings.home / "server" / "work" / f"group-{uuid.uuid4().hex[:12]}"
    groups = group_store(store)
    record = None
    try:
        unpack(request.bundle, work)
        file = work / name
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(request.file_text, encoding="utf-8")
        group = replace(group, base=replace(group.base, source_file=str(file)))
        launcher = GroupLauncher(settings, groups)  # as `phalanx group run`: refusals first, then recorded
        record = launcher.create(
            group, GroupOptions(workdir=file.parent, params=dict(request.params), cluster=cluster)
        )
        winner = submissions.reserve(store, record.id, request.idempotency_key, sha)
        if winner != record.id:  # a retry with the same key won the race: this one never ran
            groups.delete_group(record.id)
            shutil.rmtree(work, ignore_errors=True)
            return SubmitResult(winner, sha, created=False, kind="group")
        detached.mark_server_group(settings, record.id)
        process = launcher.start(record.id)
    except BaseException:
        if record is not None:
            submissions.release(store, record.id)
            groups.delete_group(record.id)
        shutil.rmtree(work, ignore_errors=True)
        raise
    threading.Thread(target=process.wait, name=f"reap-group-{record.id}", daemon=True).start()
    log.info("group %s submitted: controller pid %s", record.id, process.pid)
    return SubmitResult(record.id, sha, created=True, kind="group")


@dataclass(frozen=True)
class CloneRequest:
    """``{"from": ID, "params": {...}, "priority": N}``: run again what ID ran, with new params."""

    origin: str
    params: Mapping[str, Any]
    priority: int
    attempt: int | None = None
    extra_params: bool = False
    latest_data: bool = False  # each dataset input at its latest version (phalanx rerun --latest-data)
    idempotency_key: str | None = None
    target: str | None = None  # None: where the origin ran


def clone(store: Store, settings: Settings, request: CloneRequest) -> SubmitResult:
    """Clone and enqueue: the stored file and source snapshot of ``request.origin``, chosen by the
    rerun rule of `phalanx rerun` (its last successful attempt's), with the new params over the
    recorded ones, started on this machine's queue. The new experiment records its origin
    (``rerun_of``). SpecError (422) for params its file refuses, UsageError (400) for an origin
    that cannot be rerun, NotFound (404) for no such origin; nothing is left of a refused clone."""
    from phalanx import repro
    from phalanx.queue import check_priority
    from phalanx.runner.rerunning import rerun_source
    from phalanx.store import submissions

    key = request.idempotency_key
    if key is not None and not _KEY.match(key):
        raise UsageError("Idempotency-Key: 1 to 200 printable ASCII characters without spaces")
    check_priority(request.priority, "priority")
    cluster = None if request.target is None else cluster_of(settings, request.target)
    submissions.check_available(store)
    if key is not None:
        done = submissions.by_key(store, key)
        if done is not None:
            return SubmitResult(done.experiment_id, done.bundle_sha256, created=False)
    source = rerun_source(
        store,
        request.origin,
        request.params,
        attempt=request.attempt,
        extra_params=request.extra_params,
        latest_data=request.latest_data,
    )
    check_max_waiting(store, settings, source.spec.project or DEFAULT_PROJECT)
    sha = digest(source.snapshot)
    exp_id = uuid.uuid4().hex[:12]
    winner = submissions.reserve(store, exp_id, key, sha)
    if winner != exp_id:
        return SubmitResult(winner, sha, created=False)
    work = settings.home / "server" / "work" / exp_id
    try:
        repro.extract(source.snapshot, work)
        options = source.options(exp_id, work, request.priority)
        if request.target is not None:
            options = replace(options, cluster=cluster)
        _launch(settings, source.spec, options, work, f"rerun of {source.origin.id} from its snapshot")
    except BaseException:
        submissions.release(store, exp_id)
        shutil.rmtree(work, ignore_errors=True)
        raise
    return SubmitResult(exp_id, sha, created=True)


def check_max_waiting(store: Store, settings: Settings, project: str) -> None:
    """QuotaExceeded (429) when the project already has its quota's most experiments waiting here.
    A cheap early answer; the ledger enforces the same limit atomically when the run queues."""
    from phalanx.queue import waiting_count
    from phalanx.store import quotas

    quota = quotas.get(store, project, LOCAL)
    most = None if quota is None else quota.limit.max_waiting
    if most is None:
        return
    waiting = waiting_count(settings, project)
    if waiting >= most:
        raise QuotaExceeded(
            f"{TOO_MANY_WAITING}: project {project} already has {waiting} experiment{'s' * (waiting != 1)}"
            f" waiting, its quota's most ({most}) on this machine. Submit again when some have started,"
            f" or raise the limit with `phalanx quota set {project} --max-waiting N`"
        )


def _start(
    settings: Settings,
    spec: Any,
    request: SubmitRequest,
    name: str,
    work: Path,
    exp_id: str,
    cluster: str | None = None,
) -> None:
    from phalanx.runner import LaunchOptions, LaunchRecord

    unpack(request.bundle, work)
    file = work / name
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(request.file_text, encoding="utf-8")  # the text validated, whatever the bundle held
    spec = replace(spec, source_file=str(file))
    options = LaunchOptions(
        workdir=file.parent,
        cluster=cluster,
        priority=request.priority,
        experiment_id=exp_id,
        record=LaunchRecord(file=str(file), params=dict(request.params)),
    )
    _launch(settings, spec, options, file.parent, None)


def _launch(settings: Settings, spec: Any, options: Any, cwd: Path, headline: str | None) -> None:
    """Start the experiment's detached supervisor and return once the experiment exists."""
    from phalanx.runner import Runner, StartFailed, StartTimeout

    exp_id = options.experiment_id
    runner = Runner(settings)
    runner.dry_run(spec, options)  # what is refused before anything starts, as the CLI says it
    try:
        submitted = runner.submit(spec, options, cwd=cwd, headline=headline)
    except StartTimeout as exc:  # slow, not failed: its supervisor runs on, so keep key and folder
        log.warning("experiment %s: %s", exp_id, exc)
        threading.Thread(target=exc.process.wait, name=f"reap-{exp_id}", daemon=True).start()
        return
    except StartFailed as exc:
        said = "\n".join(line.removeprefix("error: ") for line in exc.text.splitlines() if line.strip())
        if exc.exit_code == 2 and TOO_MANY_WAITING in said:  # lost the race to the last waiting slot
            raise QuotaExceeded(said) from None
        if exc.exit_code == 2:  # the user's mistake, as `phalanx run` would have said it
            raise UsageError(said or "the experiment was refused") from None
        raise PhalanxError(f"the experiment did not start: {exc.text or exc.exit_code}") from None
    # reap the supervisor when it ends (it is ours until then); it does not depend on this thread
    threading.Thread(target=submitted.process.wait, name=f"reap-{exp_id}", daemon=True).start()
    log.info("experiment %s submitted: supervisor pid %s", exp_id, submitted.process.pid)
