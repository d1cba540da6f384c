"""The reading half of the store, answered by a Phalanx server's REST API.

Why: `phalanx ls`, `get`, `metrics`, `params`, `artifacts`, `tag`, `note`, `logs`, `group get` render
domain objects (Experiment, Replica, ParamRecord...) read from a store. Against a server they read
the same objects back from the API's JSON, so each command keeps one renderer and its output is the
same in form wherever the experiment lives. Only what those commands ask for is here; anything else
(writing events, deleting) stays the server's.
"""

from __future__ import annotations

import base64
import io
import math
import posixpath
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.apiclient import Client, quote
from phalanx.clusters import Cluster
from phalanx.domain import (
    Experiment,
    ExperimentFilter,
    ExperimentStatus,
    Group,
    LogLine,
    Page,
    Replica,
    ReplicaState,
    Resources,
    Role,
    Series,
)
from phalanx.errors import NotFound, UsageError
from phalanx.store.alert_records import Delivery, Hook
from phalanx.store.base import (
    ArtifactRecord,
    ModelRecord,
    ParamRecord,
)
from phalanx.store.placements import Placement

if TYPE_CHECKING:
    from phalanx.store.accounts import Role as ProjectRole  # its name is sent: no sqlalchemy here

# how long a notebook's start may be silent while the server builds its kernels' environment
BUILD_SECONDS = 3600.0


def _filter_query(f: ExperimentFilter, offset: int, limit: int) -> dict[str, Any]:
    """``GET /experiments``'s query for an ExperimentFilter, with the page the caller asks for."""
    return {
        "status": None if f.status is None else str(f.status),
        "project": f.project,
        "tag": f.tag,
        "q": f.text,
        "group": f.group_id,
        "offset": offset,
        "limit": limit,
        "sort": f.order_by,
    }


def _eid(experiment_id: str) -> str:
    """An experiment id as its URL segment. What cannot be an id is answered here as this machine's
    store answers it: an empty one would name the list route (whose page is no experiment) and one
    with a ``/`` no route at all (the server's bare ``Not Found``)."""
    if not experiment_id.strip():
        raise UsageError("an experiment id is required")
    if "/" in experiment_id:
        raise NotFound(f"no experiment {experiment_id!r}; `phalanx ls` lists them")
    return quote(experiment_id.strip())


def _gid(group_id: str) -> str:
    """A group id as its URL segment; an empty one or one with a ``/`` is no group (as here)."""
    if not group_id.strip() or "/" in group_id:
        raise NotFound(f"no group {group_id!r}; `phalanx group ls` lists them")
    return quote(group_id.strip())


class RemoteStore:
    """What the read and control commands ask of a store, from the server behind ``client``."""

    artifact_store = None  # downloads go through the API (``download``)

    def __init__(self, client: Client) -> None:
        self.client = client
        self.server_url: str | None = client.url  # ``store.base.Store.server_url``: this door

    # -- experiments ------------------------------------------------------------------------------
    def get_experiment(self, experiment_id: str) -> Experiment:
        return experiment_of(self.client.get(f"/experiments/{_eid(experiment_id)}"))

    def list_experiments(self, f: ExperimentFilter) -> Page[Experiment]:
        doc = self.client.get("/experiments", **_filter_query(f, f.offset, min(f.limit, 500)))
        items = [experiment_of(e) for e in doc["items"]]
        return Page(items, int(doc["total"]), int(doc["offset"]), int(doc["limit"]))

    def table(
        self, f: ExperimentFilter, where: list[str], columns: list[str], *, page_size: int = 500
    ) -> tuple[Page[Experiment], dict[str, dict[str, Any]]]:
        """The server's run table (``GET /experiments?where=&column=``): the newest ``f.limit``
        experiments meeting every condition, filtered over every experiment on the server, and their
        column values. Pages of ``page_size`` (the API's most) until ``f.limit`` or the end."""
        wanted = list(dict.fromkeys(columns))
        items: list[Experiment] = []
        values: dict[str, dict[str, Any]] = {}
        total = 0
        offset = f.offset
        while len(items) < f.limit:
            doc = self.client.get(
                "/experiments",
                **_filter_query(f, offset, min(f.limit - len(items), page_size)),
                where=list(where) or None,
                column=wanted or None,
            )
            total = int(doc["total"])
            for e in doc["items"]:
                items.append(experiment_of(e))
                values[e["id"]] = dict(e.get("columns") or {})
            offset += len(doc["items"])
            if not doc["items"] or offset >= total:
                break
        return Page(items, total, f.offset, f.limit), values

    def list_replicas(self, experiment_id: str) -> list[Replica]:
        docs = self.client.get(f"/experiments/{_eid(experiment_id)}/replicas")
        return [replica_of(experiment_id, r) for r in docs]

    def annotate(
        self, experiment_id: str, *, tags: Sequence[str] | None = None, notes: str | None = None
    ) -> Experiment:
        body: dict[str, Any] = {}
        if tags is not None:
            body["tags"] = list(tags)
        if notes is not None:
            body["notes"] = notes
        return experiment_of(self.client.send("PATCH", f"/experiments/{_eid(experiment_id)}", body))

    def delete_experiment(self, experiment_id: str) -> None:
        """``DELETE /experiments/{id}``: the server deletes it with everything it reported (its
        project's admins only); Conflict while it runs, UsageError for a short prefix."""
        self.client.send("DELETE", f"/experiments/{_eid(experiment_id)}")

    def stop(self, experiment_id: str) -> dict[str, Any]:
        return dict(self.client.send("POST", f"/experiments/{_eid(experiment_id)}/stop"))

    def resume(self, experiment_id: str) -> dict[str, Any]:
        """``POST /experiments/{id}/resume``: ``{"id", "status"}`` once the server's supervisor has
        reopened it; Conflict unless it is failed or stopped, UsageError when its folder is gone."""
        return dict(self.client.send("POST", f"/experiments/{_eid(experiment_id)}/resume"))

    # -- what it reported -------------------------------------------------------------------------
    def params(self, experiment_id: str) -> list[ParamRecord]:
        docs = self.client.get(f"/experiments/{_eid(experiment_id)}/params")
        return [
            ParamRecord(p["section"], p["key"], p["value"], p["replica"], p["rank"], p["time"]) for p in docs
        ]

    def artifacts(self, experiment_id: str) -> list[ArtifactRecord]:
        docs = self.client.get(f"/experiments/{_eid(experiment_id)}/artifacts")
        return [
            ArtifactRecord(
                a["name"],
                a["kind"],
                a["path"],
                a["size"],
                a["content_type"],
                a["replica"],
                a["rank"],
                a["time"],
                dict(a.get("metadata") or {}),
            )
            for a in docs
        ]

    def models(self, experiment_id: str) -> list[ModelRecord]:
        docs = self.client.get(f"/experiments/{_eid(experiment_id)}/models")
        return [
            ModelRecord(
                m["name"],
                m["format"],
                m["path"],
                m["size"],
                m["replica"],
                m["time"],
                dict(m.get("metadata") or {}),
            )
            for m in docs
        ]

    def texts(self, experiment_id: str) -> list[dict[str, Any]]:
        return list(self.client.get(f"/experiments/{_eid(experiment_id)}/texts"))

    def metric_titles(self, experiment_id: str) -> dict[str, list[str]]:
        doc = self.client.get(f"/experiments/{_eid(experiment_id)}/metrics")
        return {t: list(s) for t, s in doc["titles"].items()}

    def metrics(
        self, experiment_id: str, title: str | None = None, series: str | None = None
    ) -> dict[str, dict[str, Series]]:
        """Every point of each title's series (no downsampling: the CLI shows them all)."""
        titles = [title] if title is not None else list(self.metric_titles(experiment_id))
        out: dict[str, dict[str, Series]] = {}
        for t in titles:
            try:
                doc = self.client.get(f"/experiments/{_eid(experiment_id)}/metrics/{quote(t)}", series=series)
            except NotFound:
                continue
            by = {
                name: Series(
                    list(s["steps"]),
                    [math.nan if v is None else float(v) for v in s["values"]],
                    list(s["times"]),
                )
                for name, s in doc["series"].items()
            }
            if by:
                out[t] = by
        return out

    def logs(
        self, experiment_id: str, replica: str | None = None, offset: int = 0, limit: int = 1000
    ) -> list[LogLine]:
        doc = self.client.get(
            f"/experiments/{_eid(experiment_id)}/logs", replica=replica, offset=offset, limit=limit
        )
        return [
            LogLine(line["offset"], line["replica"], line["text"], line["time"], line.get("stream", "stdout"))
            for line in doc["lines"]
        ]

    def run_details(self, experiment_id: str) -> dict[str, Any]:
        doc = dict(self.client.get(f"/experiments/{_eid(experiment_id)}/run"))
        doc.pop("experiment_id", None)
        return doc

    def diff(self, a: str, b: str) -> dict[str, Any]:
        return dict(self.client.get(f"/experiments/{_eid(a)}/diff/{_eid(b)}"))

    def download_artifact(self, experiment_id: str, artifact: ArtifactRecord, directory: Path) -> Path:
        """The artifact through the server's API, to where this machine's store puts it
        (``directory``/its file name); a folder (sent as a zip) is unpacked there."""
        _, data, _ = self.client.raw(
            "GET", f"/experiments/{_eid(experiment_id)}/artifacts/{quote(artifact.name)}"
        )
        target = directory / posixpath.basename(artifact.path.rstrip("/"))
        directory.mkdir(parents=True, exist_ok=True)
        if artifact.kind == "folder":
            target.mkdir(parents=True, exist_ok=True)
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                root = target.resolve()
                for member in z.infolist():
                    dest = (target / member.filename).resolve()
                    if not dest.is_relative_to(root) or member.is_dir():
                        continue  # nothing lands outside the folder asked for
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_bytes(z.read(member))
            return target
        tmp = target.with_name(f".{target.name}.part")
        tmp.write_bytes(data)
        tmp.replace(target)
        return target

    # -- groups -----------------------------------------------------------------------------------
    def group_view(self, group_id: str) -> dict[str, Any]:
        return dict(self.client.get(f"/groups/{_gid(group_id)}"))

    def group_views(self, limit: int = 50) -> list[dict[str, Any]]:
        """The newest ``limit`` groups of the caller's projects, each with its trials' count."""
        return [dict(g) for g in self.client.get("/groups", limit=limit)]

    def remove_group(self, group_id: str) -> list[str]:
        return [str(i) for i in self.client.send("DELETE", f"/groups/{_gid(group_id)}")["deleted"]]

    def stop_group(self, group_id: str) -> dict[str, Any]:
        return dict(self.client.send("POST", f"/groups/{_gid(group_id)}/stop"))


def experiment_of(doc: dict[str, Any]) -> Experiment:
    return Experiment(
        id=doc["id"],
        name=doc["name"],
        project=doc["project"],
        status=ExperimentStatus(doc["status"]),
        framework=doc.get("framework"),
        backend=doc.get("backend"),
        cluster=doc.get("cluster"),
        tags=tuple(doc.get("tags") or ()),
        topology=dict(doc.get("topology") or {}),
        spec_text=doc.get("spec_text"),
        plan=dict(doc.get("plan") or {}),
        reason=doc.get("reason"),
        created_at=doc.get("created_at"),
        started_at=doc.get("started_at"),
        finished_at=doc.get("finished_at"),
        handle=doc.get("handle"),
        notes=doc.get("notes"),
        group_id=doc.get("group_id"),
        kind=doc.get("kind") or "training",
    )


def replica_of(experiment_id: str, doc: dict[str, Any]) -> Replica:
    return Replica(
        experiment_id=experiment_id,
        name=doc["name"],
        role=Role(doc["role"]),
        index=int(doc["index"]),
        rank=doc.get("rank"),
        state=ReplicaState(doc["state"]),
        host=doc.get("host"),
        pid=doc.get("pid"),
        exit_code=doc.get("exit_code"),
        reason=doc.get("reason"),
        resources=dict(doc.get("resources") or {}),
        started_at=doc.get("started_at"),
        finished_at=doc.get("finished_at"),
    )


def group_of(doc: dict[str, Any]) -> Group:
    """A group from the API's JSON (which leaves out its file's text)."""
    fields: dict[str, Any] = {k: doc.get(k) for k in Group.__dataclass_fields__ if k != "spec_text"}
    fields["options"] = dict(doc.get("options") or {})
    fields["stop_requested"] = bool(doc.get("stop_requested"))
    return Group(spec_text="", **fields)


class RemoteAlerts:
    """A server's alert hooks (``store.alerts.AlertBook``) through its API, which checks the
    caller's role in each hook's project (docs/alerts.md)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def add_hook(
        self, project: str, url: str, events: Sequence[str], secret: str | None, created_by: str | None
    ) -> Hook:
        """``created_by`` is the server's to say (the caller it authenticated)."""
        doc = {"url": url, "events": list(events), "secret": secret}
        return Hook.from_json(self.client.send("POST", f"/projects/{quote(project)}/alerts", doc))

    def hooks(self, projects: Sequence[str] | None = None) -> list[Hook]:
        if projects is None:
            return [Hook.from_json(h) for h in self.client.get("/alerts")]
        return [Hook.from_json(h) for p in projects for h in self.client.get(f"/projects/{quote(p)}/alerts")]

    def hook(self, hook_id: str) -> Hook:
        for hook in self.hooks():
            if hook.id == hook_id:
                return hook
        raise NotFound(f"alert hook {hook_id} does not exist (or is in a project you are not a member of)")

    def remove_hook(self, hook_id: str) -> None:
        self.client.send("DELETE", f"/alerts/{quote(hook_id)}")

    def deliveries(self, hook_id: str, limit: int = 50) -> list[Delivery]:
        found = self.client.get(f"/alerts/{quote(hook_id)}/deliveries", limit=limit)
        return [Delivery.from_json(d) for d in found]


class RemoteSecrets:
    """A server's project secrets (``store.secrets.SecretBook``) through its API: the project's
    admins set and remove them, its editors list their names; no answer ever holds a value."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def _path(self, project: str, name: str | None = None) -> str:
        path = f"/projects/{quote(project)}/secrets"
        return path if name is None else f"{path}/{quote(name)}"  # the server checks the name

    def put(self, project: str, name: str, value: str) -> None:
        self.client.send("PUT", self._path(project, name), {"value": value})

    def names(self, project: str | None = None) -> list[tuple[str, str, float]]:
        if project is None:
            raise UsageError("on a server, name the project: `phalanx secret ls PROJECT`")
        return [
            (d["project"], d["name"], float(d["updated_at"])) for d in self.client.get(self._path(project))
        ]

    def remove(self, project: str, name: str) -> None:
        self.client.send("DELETE", self._path(project, name))  # a 404 is the server's NotFound, its words


class RemoteDirectory:
    """A server's people and projects (``store.directory.Directory``) through its API: users and
    projects its admins only, a project's members its admins; the audit entry is the caller's."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def add_user(self, name: str, password: str | None, admin: bool = False) -> bool:
        added = self.client.send("POST", "/admin/users", {"name": name, "password": password, "admin": admin})
        return bool(added["team_mode_started"])

    def users(self) -> list[dict[str, Any]]:
        return [dict(u) for u in self.client.get("/admin/users")]

    def set_disabled(self, name: str, disabled: bool) -> None:
        self.client.send("PATCH", f"/admin/users/{quote(name)}", {"disabled": disabled})

    def add_project(self, name: str) -> None:
        self.client.send("POST", "/admin/projects", {"name": name})

    def projects(self) -> dict[str, dict[str, str]]:
        return {p: dict(m) for p, m in self.client.get("/admin/projects").items()}

    def set_member(self, project: str, user: str, role: ProjectRole) -> None:
        self.client.send("PUT", f"/projects/{quote(project)}/members/{quote(user)}", {"role": role.name})

    def remove_member(self, project: str, user: str) -> None:
        self.client.send("DELETE", f"/projects/{quote(project)}/members/{quote(user)}")

    def audit_trail(self, limit: int = 100, project: str | None = None) -> list[dict[str, Any]]:
        return [dict(r) for r in self.client.get("/admin/audit", limit=limit, project=project)]


class RemoteClusterBook:
    """A server's clusters and its projects' placements on them (``store.cluster_book.ClusterBook``)
    through its API: its admins only, each change audited as the caller."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def clusters(self) -> list[Cluster]:
        return [Cluster(**c) for c in self.client.get("/admin/clusters")]

    def add(self, cluster: Cluster, replace: bool = False) -> Cluster:
        return Cluster(
            **self.client.send("POST", "/admin/clusters", {**cluster.to_json(), "replace": replace})
        )

    def remove(self, name: str) -> None:
        self.client.send("DELETE", f"/admin/clusters/{quote(name)}")

    def map(self, placement: Placement) -> Placement:
        doc = {k: v for k, v in placement.to_json().items() if k not in ("project", "cluster")}
        path = f"/admin/placements/{quote(placement.cluster)}/{quote(placement.project)}"
        return Placement(**self.client.send("PUT", path, doc))

    def unmap(self, project: str, cluster: str) -> None:
        self.client.send("DELETE", f"/admin/placements/{quote(cluster)}/{quote(project)}")

    def maps(self, cluster: str | None = None) -> list[Placement]:
        return [Placement(**p) for p in self.client.get("/admin/placements", cluster=cluster)]


class RemoteServices:
    """A server's services (phalanx.server.services) through its API: a project's TensorBoards
    (its viewers') and its notebook server (its editors'); each answers at ``<server>/services/ID/``."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def start_tensorboard(self, kind: str, target: str) -> dict[str, Any]:
        """The TensorBoard of the experiment, group or project ``target`` (``kind``): the one that
        runs, else a new one (its ``started`` says which)."""
        found: dict[str, Any] = self.client.send("POST", "/services", {"kind": "tensorboard", kind: target})
        return found

    def start_notebook(
        self,
        project: str,
        inputs: Sequence[Mapping[str, str]],
        build: Mapping[str, Any] | None = None,
        resources: Resources | None = None,
        code: bytes | None = None,
    ) -> dict[str, Any]:
        """``project``'s notebook server with ``inputs`` (an experiment file's ``inputs:``), its
        kernels in ``build`` (a notebook file's build: its requirements file as its text) and
        ``resources`` held of the server's machine, ``code`` (a .tar.gz of the submitter's folder) in
        the project's notebook folder's code/, or the one that runs. The server builds the
        environment before it answers: minutes the first time."""
        doc: dict[str, Any] = {"kind": "notebook", "project": project, "inputs": [dict(i) for i in inputs]}
        if resources is not None:
            doc["resources"] = resources.to_json()
        if code is not None:  # the submitter's folder, as a submit's bundle
            doc["code"] = base64.b64encode(code).decode()
        if build is None:
            found: dict[str, Any] = self.client.send("POST", "/services", doc)
            return found
        found = self.client.send("POST", "/services", {**doc, "build": dict(build)}, timeout=BUILD_SECONDS)
        return found

    def start_model(self, ref: str, replicas: int = 1, resources: Resources | None = None) -> dict[str, Any]:
        """The registered model ``ref`` (``NAME@alias``) served on the server by ``replicas``
        processes (each with ``resources`` of the server's machine), or the one that is."""
        doc: dict[str, Any] = {"kind": "model", "model": ref, "replicas": replicas}
        if resources is not None:
            doc["resources"] = resources.to_json()
        found: dict[str, Any] = self.client.send("POST", "/services", doc)
        return found

    def services(self, kind: str | None = None) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.client.get("/services")
        return [s for s in found if kind is None or s["kind"] == kind]

    def stop(self, service_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.client.send("DELETE", f"/services/{quote(service_id)}")
        return found

    def url_of(self, service: dict[str, Any]) -> str:
        return self.client.url.rstrip("/") + str(service["path"])
