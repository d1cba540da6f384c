"""A server in team mode for the policy tests: a server admin, projects A and B, and one user per
role (none, viewer of A, editor of A, admin of A, admin of B), each with a personal token."""

from __future__ import annotations

from dataclasses import dataclass

from phalanx.domain import Group
from phalanx.store.accounts import Accounts, Role
from phalanx.store.base import Store
from phalanx.store.registry import registry_store

ROLES = ("none", "viewer_a", "editor_a", "admin_a", "admin_b", "root")


@dataclass
class Team:
    accounts: Accounts
    tokens: dict[str, str]  # role name -> personal token


def make_team(store: Store) -> Team:
    accounts = Accounts(store)
    accounts.add_user("root", None, admin=True)  # team mode from here on
    for project in ("A", "B"):
        accounts.add_project(project)
    for name in ("none", "viewer_a", "editor_a", "admin_a", "admin_b", "spare"):
        accounts.add_user(name, None)
    accounts.set_member("A", "viewer_a", Role.viewer)
    accounts.set_member("A", "editor_a", Role.editor)
    accounts.set_member("A", "admin_a", Role.admin)
    accounts.set_member("B", "admin_b", Role.admin)
    tokens = {name: accounts.issue_token(name, "test", None)[0] for name in ROLES}
    return Team(accounts, tokens)


def make_group(store: Store, project: str) -> Group:
    return store.create_group(
        name="search",
        project=project,
        search="grid",
        planned=1,
        concurrency=1,
        metric=None,
        optimization=None,
        spec_text="version: 1\nkind: group\n",
        source_file=None,
        workdir=None,
        options={},
    )


def make_model(store: Store, name: str, experiment_id: str, project: str) -> None:
    """Register version 1 of ``name`` in ``project`` straight into the registry's tables (with a
    file whose sha256 it records), without the ONNX check: what the route tests need to read."""
    import hashlib

    from phalanx.registry.service import REGISTRY_ID

    data = f"model {name}".encode()
    digest = hashlib.sha256(data).hexdigest()
    path = f"{name}/{digest}.onnx"
    assert store.artifact_store is not None
    store.artifact_store.put_bytes(REGISTRY_ID, path, data)
    fields = {
        "experiment_id": experiment_id,
        "source": "model.onnx",
        "path": path,
        "sha256": digest,
        "size": len(data),
        "signature": {},
        "lineage": {"experiment": {"id": experiment_id, "project": project}},
        "description": None,
        "tags": {},
    }
    registry_store(store).add_version(name, fields, project=project)
