"""Who may call which route: every route declares a policy, and one app-wide dependency enforces it.

A route declares its rule with the ``policy`` decorator, under the router's::

    @router.post("/experiments/{experiment_id}/stop")
    @policy("experiment:editor")
    def stop_experiment(...): ...

Rules (docs/teams.md#policies):

- ``public``: anybody (health, the login form, the token exchange);
- ``signed-in``: any signed-in user; lists are narrowed to the user's projects by the route;
- ``site:admin``: a server admin;
- ``any:editor``: an editor (or admin) of at least one project (registering a model version: the
  route then checks the experiment's project and the model's);
- ``experiment:ROLE``, ``group:ROLE``, ``project:ROLE``, ``model:ROLE``, ``alert:ROLE``,
  ``service:ROLE``: that role (viewer < editor < admin) in the project of the ``experiment_id``,
  ``group_id``, ``project``, (a registered model's) ``name``, (an alert hook's) ``hook_id`` or (a
  running service's) ``service_id`` path parameter (a service may ask more: its own ``role``);
  somebody in none of the project's roles gets 404, as if it did not exist (its existence is not
  theirs to know);
- ``body``: the route checks the role itself on what its body names (``require``), e.g. a submit's
  project or an ingest batch's experiments.

A route without a declared policy is refused (403) for everybody, and a test lists every route's
policy. In single-token mode (no admin user yet) the server token is all-powerful, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import HTTPException, Request
from fastapi.routing import APIRoute
from starlette.requests import HTTPConnection

from phalanx.errors import NotFound
from phalanx.share import DEFAULT_PROJECT
from phalanx.store.accounts import Role
from phalanx.store.alerts import alert_book
from phalanx.store.registry import registry_store
from phalanx.suggest import did_you_mean

F = TypeVar("F", bound=Callable[..., Any])

ATTRIBUTE = "__phalanx_policy__"
_LISTED = 10  # a caller's projects named in a refusal, at most
SCOPES = ("experiment", "group", "project", "model", "alert", "service")
RULES = frozenset(
    {"public", "signed-in", "site:admin", "body", "any:editor"}
    | {f"{s}:{r.name}" for s in SCOPES for r in Role}
)


@dataclass(frozen=True)
class Principal:
    """Who is asking. ``superuser``: the server token (single-token mode, or the admin's it became)
    or a server admin; ``replica_of``: a replica's per-experiment, write-only token."""

    user: str | None
    superuser: bool = False
    roles: Mapping[str, Role] = field(default_factory=dict)
    replica_of: str | None = None

    @property
    def name(self) -> str:
        if self.replica_of is not None:
            return f"replica:{self.replica_of}"
        return self.user or "server-token"

    def role_in(self, project: str) -> Role | None:
        return Role.admin if self.superuser else self.roles.get(project)

    def visible_projects(self) -> tuple[str, ...] | None:
        """The projects this principal may read; None: all of them."""
        return None if self.superuser else tuple(sorted(self.roles))


EVERYBODY = Principal(user=None, superuser=True)  # single-token mode: whoever got in
NOBODY = Principal(user=None)


def policy(rule: str) -> Callable[[F], F]:
    """Declare who may call the route below (the rules above)."""
    if rule not in RULES:
        raise ValueError(f"unknown policy {rule!r}; one of {sorted(RULES)}")

    def mark(endpoint: F) -> F:
        setattr(endpoint, ATTRIBUTE, rule)
        return endpoint

    return mark


def rule_of(endpoint: Any) -> str | None:
    rule = getattr(endpoint, ATTRIBUTE, None)
    return rule if isinstance(rule, str) else None


def principal_of(request: HTTPConnection) -> Principal:
    found = request.scope.get("state", {}).get("principal")
    return found if isinstance(found, Principal) else EVERYBODY


def require(request: Request, project: str, role: Role, what: str, hint: str = "") -> None:
    """403 unless the caller holds ``role`` in ``project``; 404 (``what`` "does not exist", then
    ``hint``) when the caller is in none of its roles."""
    who = principal_of(request)
    held = who.role_in(project)
    if held is None:
        raise NotFound(f"{what} does not exist (or is in a project you are not a member of){hint}")
    if held < role:
        raise HTTPException(
            403,
            f"{who.name} is {'an' if held.name[0] in 'aeiou' else 'a'} {held.name} of project {project!r};"
            f" this needs {role.name}"
            " (ask a project admin)",
        )


def require_project(request: Request, project: str, role: Role, *, from_file: bool = False) -> None:
    """``require`` for a project the caller named: one they are in none of the roles of is answered
    with their own projects and the nearest of them (`visoin`: vision), theirs alone, so the answer
    is the same whether another project or none has that name (``not_theirs``). Whoever sees every
    project gets through; a write then refuses a name the server does not know in its own words
    (``check_project``). ``from_file``: the project is a run's file's (`default` when it names
    none), which the answer says how to change."""
    who = principal_of(request)
    if who.role_in(project) is None:
        raise NotFound(not_theirs(project, sorted(who.roles), from_file=from_file))
    require(request, project, role, f"project {project}")


def not_theirs(project: str, theirs: Sequence[str], *, from_file: bool = False) -> str:
    """What somebody in none of ``project``'s roles is told of it (``theirs``: their projects): the
    same whether it exists or not, with how to go on (``from_file``: a run's file named it)."""
    listed = ", ".join(theirs[:_LISTED]) + (", ..." if len(theirs) > _LISTED else "") or "none"
    if from_file and project == DEFAULT_PROJECT:
        fix = f"a file that names no `project:` runs in {DEFAULT_PROJECT!r}: name one of yours in it"
    else:
        fix = "a project's admin adds members: `phalanx admin member add PROJECT USER`"
    return (
        f"project {project!r} does not exist or you are not a member of it{did_you_mean(project, theirs)}"
        f" (your projects: {listed}; {fix})"
    )


def require_experiment(request: Request, experiment_id: str, role: Role) -> Any:
    """The experiment, when the caller holds ``role`` in its project (or it is the replica's own)."""
    store = request.app.state.store
    who = principal_of(request)
    visible = None if who.replica_of is not None else who.visible_projects()
    if visible is not None:  # a prefix names only what the caller may see (nor is ambiguous by more)
        experiment_id = store.resolve_id(experiment_id, projects=visible)
    experiment = store.get_experiment(experiment_id)  # NotFound says it as the CLI does
    if who.replica_of is not None:
        if experiment.id != who.replica_of:
            raise HTTPException(403, f"this is a replica token of experiment {who.replica_of}")
        return experiment
    require(request, experiment.project, role, f"experiment {experiment_id}")
    return experiment


def typed_id(request: Request, full_id: str) -> str:
    """The id (or prefix) the caller typed for the experiment's or group's ``full_id`` the route
    was given: what a destructive route checks is long enough (phalanx.ids.check_destructive)."""
    typed = request.scope.get("phalanx.typed_ids", {}).get(full_id)
    return typed if isinstance(typed, str) else full_id


def checked_experiment(request: Request, experiment_id: str) -> Any:
    """The experiment the access policy read for this request (None when it read none)."""
    return request.scope.get("phalanx.experiments", {}).get(experiment_id)


def enforce(request: Request) -> None:
    """The app-wide dependency: the matched route's declared rule, or 403 when it declares none."""
    rule = rule_of(request.scope.get("endpoint"))
    if rule is None:
        raise HTTPException(403, f"{request.url.path} declares no access policy, so nobody may call it")
    if rule == "public":
        return
    who = principal_of(request)
    if who.replica_of is not None and rule not in ("body",) and not rule.startswith("experiment:"):
        raise HTTPException(
            403, f"this is a replica token of experiment {who.replica_of}: it only sends its records"
        )
    if rule == "body":
        return
    if who.user is None and not who.superuser and who.replica_of is None:
        raise HTTPException(401, "sign in first: send 'Authorization: Bearer <token>'")
    if rule == "signed-in":
        return
    if rule == "any:editor":
        if not who.superuser and all(r < Role.editor for r in who.roles.values()):
            raise HTTPException(403, f"{who.name} is an editor of no project; ask a project admin")
        return
    if rule == "site:admin":
        if not who.superuser:
            raise HTTPException(403, f"{who.name} is not a server admin")
        return
    scope, _, role_name = rule.partition(":")
    role = Role[role_name]
    params = request.path_params
    if scope == "experiment":
        typed = str(params["experiment_id"])
        experiment = require_experiment(request, typed, role)
        # the route reads the full id the caller's prefix named among their projects (resolving the
        # prefix again over every project could find it ambiguous); typed_id keeps what was typed
        params["experiment_id"] = experiment.id
        request.scope.setdefault("phalanx.typed_ids", {})[experiment.id] = typed
        # what the route may take instead of reading it again (the chart route does: a lookup less)
        request.scope.setdefault("phalanx.experiments", {})[experiment.id] = experiment
    elif scope == "group":
        group_id = str(params["group_id"])
        groups = request.app.state.store
        visible = principal_of(request).visible_projects()
        # a prefix names only the caller's projects' groups (nor is ambiguous by others'); a missing
        # one is the store's own words: "... or is in a project you are not a member of" for a
        # member, what `phalanx group get` says on the server's machine for whoever sees every project
        group = groups.get_group(groups.resolve_group(group_id, projects=visible))
        require(request, group.project, role, f"group {group_id}")
        params["group_id"] = group.id
        request.scope.setdefault("phalanx.typed_ids", {})[group.id] = group_id
    elif scope == "model":
        name = str(params["name"])
        try:
            project = registry_store(request.app.state.store).model_project(name)
        except NotFound:  # the registry's own words (how to register one) for whoever sees every
            if principal_of(request).visible_projects() is None:  # project; the others learn nothing
                raise  # of which names another project's models have: as for another's model
            raise NotFound(
                f"model {name} does not exist (or is in a project you are not a member of)"
            ) from None
        require(request, project, role, f"model {name}")
    elif scope == "alert":
        hook_id = str(params["hook_id"])  # an unknown hook: the book's own NotFound
        require(
            request, alert_book(request.app.state.store).hook(hook_id).project, role, f"alert hook {hook_id}"
        )
    elif scope == "service":
        service_id = str(params["service_id"])  # a stopped or unknown one: the services' own NotFound
        service = request.app.state.services.get(service_id)
        require(request, service.project, max(role, service.role), f"service {service_id}")
    else:
        require_project(request, str(params["project"]), role)


def declared_routes(app: Any) -> list[tuple[frozenset[str], str, str | None]]:
    """Every API route of ``app`` (methods, path, declared rule or None), included routers too:
    what ``phalanx.server`` tests check so that no route goes without a policy."""
    found: list[tuple[frozenset[str], str, str | None]] = []

    def walk(routes: Any, prefix: str) -> None:
        for route in routes:
            if isinstance(route, APIRoute):
                found.append((frozenset(route.methods or ()), prefix + route.path, rule_of(route.endpoint)))
                continue
            inner = getattr(route, "original_router", None)  # FastAPI's included router
            if inner is not None:
                context = getattr(route, "include_context", None)
                walk(inner.routes, prefix + str(getattr(context, "prefix", "") or ""))

    walk(app.routes, "")
    return found
