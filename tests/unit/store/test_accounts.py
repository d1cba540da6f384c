"""The teams tables on SQLite and PostgreSQL (the ``store`` fixture): users with argon2 hashes,
personal tokens kept as hashes, roles, the audit trail in order and who launched what."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from phalanx.errors import AccountDisabled, Conflict, NotFound, UsageError
from phalanx.store.accounts import Accounts, Role
from phalanx.store.artifacts import ArtifactStore
from phalanx.store.sql import SqlStore


def test_users_passwords_and_the_first_admin(store: SqlStore) -> None:
    accounts = Accounts(store)
    assert accounts.first_admin() is None  # single-token mode
    accounts.add_user("ada", "a-long-password")
    assert accounts.first_admin() is None
    accounts.add_user("root", "another-password", admin=True)
    assert accounts.first_admin() == "root"
    assert accounts.user("ada").password_hash.startswith("$argon2")  # type: ignore[union-attr]
    assert accounts.authenticate("ada", "a-long-password") == "ada"
    assert accounts.authenticate("ada", "wrong-password") is None
    assert accounts.authenticate("nobody", "a-long-password") is None
    with pytest.raises(Conflict):
        accounts.add_user("ada", "a-long-password")
    with pytest.raises(UsageError, match="at least 8"):
        accounts.add_user("bob", "short")
    accounts.set_disabled("ada", True)
    assert accounts.authenticate("ada", "wrong-password") is None  # a wrong password learns nothing
    with pytest.raises(AccountDisabled, match="the account 'ada' is disabled"):  # the right one, why
        accounts.authenticate("ada", "a-long-password")


def test_an_admin_added_elsewhere_counts_at_once_while_asking_again_costs_sqlite_no_query(
    store: SqlStore, tmp_path: Path
) -> None:
    """A server asks for the first admin on every request; `phalanx admin user add` runs in another
    process (here: another engine, connections of its own)."""
    accounts = Accounts(store)
    queries: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "FROM users" in statement:
            queries.append(statement)

    event.listen(store.engine, "before_cursor_execute", count)
    assert accounts.first_admin() is None
    assert accounts.first_admin() is None
    assert accounts.first_admin() is None
    # SQLite: asked once, then nothing was committed; PostgreSQL has no commit counter: asked each time
    assert len(queries) == (1 if store.engine.dialect.name == "sqlite" else 3)
    elsewhere = SqlStore(
        store.engine.url.render_as_string(hide_password=False), ArtifactStore(str(tmp_path / "other"))
    )
    try:
        Accounts(elsewhere).add_user("ada", "a-long-password")
        assert accounts.first_admin() is None  # a commit: asked again, still none
        Accounts(elsewhere).add_user("root", "another-password", admin=True)
        assert accounts.first_admin() == "root"  # the very next request is in team mode
    finally:
        elsewhere.close()


def test_tokens_are_kept_hashed_and_revoked(store: SqlStore) -> None:
    accounts = Accounts(store)
    accounts.add_user("ada", None)
    token, record = accounts.issue_token("ada", "laptop", 1)
    assert accounts.user_of_token(token) == "ada"
    assert accounts.user_of_token(token + "x") is None
    assert [t.name for t in accounts.tokens("ada")] == ["laptop"] and record.expires_at is not None
    with pytest.raises(Conflict):
        accounts.issue_token("ada", "laptop", None)
    accounts.revoke_token("ada", "laptop")
    assert accounts.user_of_token(token) is None
    with pytest.raises(NotFound):
        accounts.revoke_token("ada", "laptop")


def test_roles_audit_and_launches(store: SqlStore) -> None:
    accounts = Accounts(store)
    accounts.add_user("ada", None)
    accounts.add_project("vision")
    with pytest.raises(NotFound, match="phalanx admin project add"):
        accounts.set_member("nlp", "ada", Role.editor)
    accounts.set_member("vision", "ada", Role.viewer)
    accounts.set_member("vision", "ada", Role.editor)
    assert accounts.roles_of("ada") == {"vision": Role.editor}
    for action in ("experiment.submit", "experiment.stop", "experiment.delete"):
        accounts.audit("ada", action, "abc123", "vision")
    assert [e.action for e in accounts.audit_trail()] == [
        "experiment.submit",
        "experiment.stop",
        "experiment.delete",
    ]
    assert [e.action for e in accounts.audit_trail(limit=1)] == ["experiment.delete"]
    accounts.record_launch("experiment", "abc123", "ada")
    assert accounts.launched_by("experiment", "abc123") == "ada"
    assert accounts.launched_by("group", "abc123") is None
