"""Accepting a submit: validated, authorized, admitted and written before it is answered.

A submit (an experiment file with its code bundle, a `kind: group` file, or a clone of an earlier
experiment) is checked in full first: the request's shape, the file (422 with `FILE:LINE:COL`
problems), the caller's role in its project (403/404), the target (400), and whether it could ever
start (bigger than its project's whole quota or this machine: 400) or may wait (its project's
waiting slots: 429). Only then is an idempotency key looked up, per user: a replay of the same
request answers the first id, another request with the same key is refused (409). The submit is
then written: its code bundle (content-addressed) and its launch order on disk, then its
experiment (status created) or group row, its submission and audit entry in one transaction.
It is answered after that commit; the server's launcher (``server.launcher``) does the slow part
afterwards (unpacking, builds, starting the supervisor or the group's controller), and starts
after a restart whatever it had not started yet. So an answered submit runs, exactly once, and a
crash before the commit leaves nothing a client was told about.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from phalanx import bundles
from phalanx.bundles import BundleStore, digest
from phalanx.config import Settings
from phalanx.domain import Replica
from phalanx.errors import UsageError
from phalanx.extras import require
from phalanx.ids import new_id
from phalanx.plan import Plan, build_plan
from phalanx.queue import check_priority
from phalanx.runner.options import Launch, LaunchOptions, LaunchRecord
from phalanx.runner.rerunning import rerun_source
from phalanx.server import orders
from phalanx.server.admission import backend_of, check_max_waiting, check_size, cluster_of
from phalanx.server.boxing import isolation_for
from phalanx.share import DEFAULT_PROJECT, LOCAL
from phalanx.spec.group import example_values, is_group_text, load_group_text
from phalanx.spec.loader import load_spec_text
from phalanx.store.base import LocalStore
from phalanx.store.submissions import (
    Acceptance,
    AuditEntry,
    NewExperiment,
    NewGroup,
    Submission,
    SubmissionKind,
    SubmissionState,
    key_conflict,
)

_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")  # printable ASCII, no spaces


@dataclass(frozen=True)
class Submitter:
    """Who submits: the name their idempotency keys and the audit trail go under, and the check
    of their role in a project (raises 403/404 when they may not submit there)."""

    name: str
    authorize: Callable[[str], None]


@dataclass(frozen=True)
class SubmitRequest:
    file_name: str
    file_text: str
    params: Mapping[str, Any]
    priority: int
    bundle: bytes
    idempotency_key: str | None = None
    target: str = LOCAL
    extra_params: bool = False  # params the file does not declare are recorded (`--extra-params`)


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


@dataclass(frozen=True)
class SubmitResult:
    experiment_id: str
    bundle_sha256: str
    created: bool  # False: an earlier submit with the same idempotency key made it
    kind: str = "experiment"  # or "group": the id is a group's (a `kind: group` file)
    project: str | None = None


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


def check_key(key: str | None) -> None:
    if key is not None and not _KEY.match(key):
        raise UsageError("Idempotency-Key: 1 to 200 printable ASCII characters without spaces")


def fingerprint(doc: Mapping[str, Any]) -> str:
    """The request's fingerprint: a replay must send the same one (Stripe's rule)."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def submit(store: LocalStore, settings: Settings, request: SubmitRequest, who: Submitter) -> SubmitResult:
    """Accept a file with its code bundle (see the module docstring); the result's id names an
    experiment, or a group for a `kind: group` file."""
    name = check_file_name(request.file_name)
    check_key(request.idempotency_key)
    check_priority(request.priority, "priority")
    cluster = cluster_of(settings, request.target)
    sha = digest(request.bundle)
    print_ = fingerprint(
        {
            "file_name": name,
            "file_text": request.file_text,
            "params": dict(request.params),
            "priority": request.priority,
            "target": request.target,
            "bundle": sha,
            "extra_params": request.extra_params,
        }
    )
    if is_group_text(request.file_text, name):
        return _submit_group(store, settings, request, name, sha, print_, who, cluster)
    spec = load_spec_text(request.file_text, name, params=request.params, extra_params=request.extra_params)
    project = spec.project or DEFAULT_PROJECT
    who.authorize(project)
    replayed = _replay(store, who, request.idempotency_key, print_, SubmissionKind.EXPERIMENT)
    if replayed is not None:
        return replayed
    plan = build_plan(spec)
    check_size(store, plan, cluster)
    if cluster is None:
        check_max_waiting(store, settings, project)
    bundles.check(request.bundle)  # what the launcher's unpack would refuse, refused now
    exp_id = new_id()
    work = settings.home / "server" / "work" / exp_id
    file = work / name
    options = LaunchOptions(
        workdir=file.parent,
        cluster=cluster,
        priority=request.priority,
        experiment_id=exp_id,
        record=LaunchRecord(file=str(file), params=dict(request.params)),
        accepted=True,
        isolation=isolation_for(settings, project),  # carried by the order to the launcher's start
    )
    launch = Launch(replace(spec, source_file=str(file)), options)
    BundleStore(bundles_dir(settings)).put(request.bundle)
    order = orders.Order(exp_id, SubmissionKind.EXPERIMENT, sha, work, name, request.file_text, launch)
    return _accept(store, settings, order, plan, cluster, who, request.idempotency_key, print_)


def clone(store: LocalStore, settings: Settings, request: CloneRequest, who: Submitter) -> SubmitResult:
    """Clone and enqueue: the stored file and source snapshot of ``request.origin`` (the rerun rule
    of `phalanx rerun`: its last successful attempt's), with the new params over the recorded
    ones, accepted as a submit whose code is that snapshot. The new experiment records its origin
    (``rerun_of``). SpecError (422) for params its file refuses, UsageError (400) for an origin that
    cannot be rerun, NotFound (404) for no such origin; nothing is written for a refused clone.
    The caller has checked the submitter's role in the origin's project."""
    check_key(request.idempotency_key)
    check_priority(request.priority, "priority")
    cluster = None if request.target is None else cluster_of(settings, request.target)
    print_ = fingerprint(
        {
            "from": request.origin,
            "params": dict(request.params),
            "priority": request.priority,
            "attempt": request.attempt,
            "extra_params": request.extra_params,
            "latest_data": request.latest_data,
            "target": request.target,
        }
    )
    replayed = _replay(store, who, request.idempotency_key, print_, SubmissionKind.EXPERIMENT)
    if replayed is not None:
        return replayed
    source = rerun_source(
        store,
        request.origin,
        request.params,
        attempt=request.attempt,
        extra_params=request.extra_params,
        latest_data=request.latest_data,
    )
    project = source.spec.project or DEFAULT_PROJECT
    exp_id = new_id()
    work = settings.home / "server" / "work" / exp_id
    # a clone is boxed as its project's submits are (whatever its origin was)
    options = replace(
        source.options(exp_id, work, request.priority),
        accepted=True,
        isolation=isolation_for(settings, project),
    )
    if request.target is not None:
        options = replace(options, cluster=cluster)
    plan = build_plan(source.spec)
    check_size(store, plan, options.cluster)
    if options.cluster is None:
        check_max_waiting(store, settings, project)
    sha = BundleStore(bundles_dir(settings)).put(source.snapshot)
    headline = f"rerun of {source.origin.id} from its snapshot"
    launch = Launch(source.spec, options, headline=headline)
    order = orders.Order(exp_id, SubmissionKind.EXPERIMENT, sha, work, launch=launch, snapshot=True)
    detail = f"from {source.origin.id}" + (
        f" with {json.dumps(dict(request.params))}" if request.params else ""
    )
    return _accept(
        store, settings, order, plan, options.cluster, who, request.idempotency_key, print_, detail
    )


def bundles_dir(settings: Settings) -> Path:
    return settings.home / "server" / "bundles"


def _replay(
    store: LocalStore, who: Submitter, key: str | None, print_: str, kind: SubmissionKind
) -> SubmitResult | None:
    """The first submit's answer when ``key`` was used by this user for this very request;
    Conflict (409) when for another one; None when the key is new (or none was sent)."""
    if key is None:
        return None
    held = store.submission_by_key(who.name, key, time.time())
    if held is None:
        return None
    if held.fingerprint != print_ or held.kind is not kind:
        raise key_conflict(key)
    return SubmitResult(held.id, held.bundle_sha256, created=False, kind=held.kind.value)


def _accept(
    store: LocalStore,
    settings: Settings,
    order: orders.Order,
    plan: Plan,
    cluster: str | None,
    who: Submitter,
    key: str | None,
    print_: str,
    detail: str | None = None,
) -> SubmitResult:
    """Write the order, then the experiment and its submission in one transaction."""
    orders.write(settings, order)
    record = NewExperiment(
        id=order.id,
        name=plan.name,
        project=plan.project,
        replicas=[
            Replica(
                experiment_id=order.id,
                name=r.name,
                role=r.role,
                index=r.index,
                rank=r.rank,
                resources=r.resources.to_json(),
            )
            for r in plan.replicas
        ],
        framework=str(plan.framework) if plan.framework else None,
        backend=backend_of(settings, plan, cluster),
        cluster=cluster,
        tags=plan.tags,
        topology=plan.topology(),
        spec_text=plan.source_text or "",
        plan=plan.to_json(),
    )
    action = "experiment.clone" if order.snapshot else "experiment.submit"
    return _commit(
        store,
        settings,
        order,
        record,
        who,
        key,
        print_,
        AuditEntry(who.name, action, order.id, plan.project, detail),
    )


def _commit(
    store: LocalStore,
    settings: Settings,
    order: orders.Order,
    record: NewExperiment | NewGroup,
    who: Submitter,
    key: str | None,
    print_: str,
    audit: AuditEntry,
) -> SubmitResult:
    submission = Submission(
        id=order.id,
        kind=order.kind,
        bundle_sha256=order.bundle_sha256,
        submitted_at=time.time(),
        state=SubmissionState.ACCEPTED,
        user=who.name,
        key=key,
        fingerprint=print_,
    )
    try:
        held, created = store.accept(Acceptance(submission, record, audit), time.time())
    except BaseException:
        orders.remove(settings, order.id)
        raise
    if not created:  # a retry with the same key won the race: this one was never written
        orders.remove(settings, order.id)
    return SubmitResult(
        held.id, held.bundle_sha256, created=created, kind=held.kind.value, project=record.project
    )


def _submit_group(
    store: LocalStore,
    settings: Settings,
    request: SubmitRequest,
    name: str,
    sha: str,
    print_: str,
    who: Submitter,
    cluster: str | None,
) -> SubmitResult:
    """A `kind: group` file: validated and recorded as `phalanx group run` does; the launcher then
    unpacks it, builds the trials' environment (or checks a cluster could run them) and starts its
    controller in its own process (``groups.detached``), which a restarted server adopts."""
    group = load_group_text(request.file_text, name, params=request.params, extra_params=request.extra_params)
    project = group.base.project or DEFAULT_PROJECT
    who.authorize(project)
    require("optuna", "search", "a group on the server")
    replayed = _replay(store, who, request.idempotency_key, print_, SubmissionKind.GROUP)
    if replayed is not None:
        return replayed
    check_size(store, build_plan(group.trial_spec(example_values(group))), cluster)
    bundles.check(request.bundle)
    group_id = new_id()
    work = settings.home / "server" / "work" / f"group-{group_id}"
    file = work / name
    box = isolation_for(settings, project)
    base = group.base
    hp = group.hptuning
    record = NewGroup(
        id=group_id,
        name=base.name or PurePosixPath(name).stem,
        project=project,
        search=hp.search.kind,
        planned=hp.planned_trials(),
        concurrency=hp.concurrency,
        metric=hp.metric.name if hp.metric else None,
        optimization=hp.metric.optimization if hp.metric else None,
        spec_text=base.source_text or "",
        source_file=str(file),
        workdir=str(file.parent),
        options={
            "params": dict(request.params),
            "cluster": cluster,
            "oversubscribe": False,
            "allow_unused": False,
            "extra_params": request.extra_params,
            "isolation": box.to_json() if box else None,  # every trial's, and its build's
        },
    )
    BundleStore(bundles_dir(settings)).put(request.bundle)
    order = orders.Order(group_id, SubmissionKind.GROUP, sha, work, name, request.file_text, target=cluster)
    orders.write(settings, order)
    audit = AuditEntry(who.name, "group.submit", group_id, project)
    return _commit(store, settings, order, record, who, request.idempotency_key, print_, audit)
