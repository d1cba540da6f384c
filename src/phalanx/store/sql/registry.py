"""The model registry's tables in the SQL store (``registered_models``, ``model_versions``,
``model_aliases``; migration 0007_model_registry_i27). phalanx.registry calls this class; nothing
else does. Every method is one transaction, and SQLAlchemy's errors leave it as Phalanx errors.

Version numbers are taken as max + 1 inside the inserting transaction; two registrations racing on
PostgreSQL collide on the primary key and the loser retries, so numbers stay dense and unique.
Moving an alias is one upsert of its row: readers see the old version or the new one, never none.

A name's files (the registry's copies, under a path holding the name) change only under the name's
lock (``_lock_name``): ``add_version`` checks its file there before it inserts the row, ``remove``
decides which files no version names any more and deletes them there, after its rows' commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table, delete, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError

from phalanx.errors import NotFound
from phalanx.store.registry_records import ModelVersion, RegisteredModel
from phalanx.store.sql import alerts
from phalanx.store.sql.engine import writer
from phalanx.store.sql.errors import phalanx_errors
from phalanx.store.sql.models import ModelAliasRow, ModelVersionRow, RegisteredModelRow
from phalanx.suggest import closest

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

_RETRIES = 5
_LOCK_SPACE = 0x72656769  # the first key of the registry's PostgreSQL advisory locks ("regi")


def _upsert(dialect: str) -> Any:
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert  # why: on PostgreSQL only (0.25 s)

        return pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert  # why: the dialect in use only

    return sqlite_insert


@phalanx_errors
class SqlRegistry:
    """The registry's rows in ``engine``'s database (the store's). See phalanx.registry.service for the
    operations users call (which also copy and check the files)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._writer = writer(engine)
        self.dialect = engine.dialect.name

    def add_version(
        self,
        name: str,
        fields: Mapping[str, Any],
        project: str = "default",
        *,
        keep_file: Callable[[], None] | None = None,
        may_add: Callable[[str | None], None] | None = None,
    ) -> int:
        """Insert the next version of ``name`` (creating the name in ``project``; an existing name
        keeps its own) and return its number. ``keep_file`` is called in the transaction under the
        name's lock, before the row is inserted (it puts the version's file back if a removal took it);
        ``may_add`` before it, with the project the name belongs to now (None: a new name): what it
        raises refuses the version, nothing written."""
        for attempt in range(_RETRIES):
            now = time.time()
            try:
                with self._writer.begin() as conn:
                    if keep_file is not None or may_add is not None:
                        self._lock_name(conn, name)
                    if may_add is not None:
                        may_add(
                            conn.execute(
                                select(RegisteredModelRow.c.project).where(RegisteredModelRow.c.name == name)
                            ).scalar()
                        )
                    if keep_file is not None:
                        keep_file()
                    stmt = _upsert(self.dialect)(RegisteredModelRow).values(
                        name=name, project=project, description=None, tags={}, created_at=now, updated_at=now
                    )
                    conn.execute(
                        stmt.on_conflict_do_update(index_elements=["name"], set_={"updated_at": now})
                    )
                    latest = conn.execute(
                        select(func.max(ModelVersionRow.c.version)).where(ModelVersionRow.c.name == name)
                    ).scalar()
                    given = conn.execute(
                        select(RegisteredModelRow.c.last_version).where(RegisteredModelRow.c.name == name)
                    ).scalar()
                    number = max(int(latest or 0), int(given or 0)) + 1  # a removed number is not reused
                    conn.execute(
                        insert(ModelVersionRow).values(
                            {**fields, "name": name, "version": number, "created_at": now}
                        )
                    )
                    conn.execute(
                        update(RegisteredModelRow)
                        .where(RegisteredModelRow.c.name == name)
                        .values(last_version=number)
                    )
                return number
            except IntegrityError:
                if attempt == _RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def set_alias(self, name: str, alias: str, version: int) -> int | None:
        """Point ``name@alias`` at ``version``; returns the version it pointed at before (or None).
        The project's hooks on ``model.alias`` hear of a move in the same transaction."""
        now = time.time()
        with self._writer.begin() as conn:
            if (
                conn.execute(
                    select(ModelVersionRow.c.version).where(
                        ModelVersionRow.c.name == name, ModelVersionRow.c.version == version
                    )
                ).scalar()
                is None
            ):
                raise NotFound(f"model {name} has no version {version}{self._versions_hint(conn, name)}")
            before = conn.execute(
                select(ModelAliasRow.c.version).where(
                    ModelAliasRow.c.name == name, ModelAliasRow.c.alias == alias
                )
            ).scalar()
            stmt = _upsert(self.dialect)(ModelAliasRow).values(
                name=name, alias=alias, version=version, updated_at=now
            )
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["name", "alias"], set_={"version": version, "updated_at": now}
                )
            )
            previous = None if before is None else int(before)
            alerts.record_alias_moved(conn, name, alias, previous, version)
        return previous

    def delete_alias(self, name: str, alias: str) -> None:
        with self._writer.begin() as conn:
            gone = conn.execute(
                delete(ModelAliasRow).where(ModelAliasRow.c.name == name, ModelAliasRow.c.alias == alias)
            ).rowcount
        if not gone:
            raise NotFound(f"model {name} has no alias {alias!r}")

    def remove(
        self,
        name: str,
        version: int | None = None,
        *,
        drop_files: Callable[[list[str]], None] | None = None,
    ) -> list[ModelVersion]:
        """Remove one version of ``name`` (with the aliases naming it) or, ``version`` None, the
        name with every version and alias; returns what was removed, each with the aliases it had.
        Nothing is removed when the name or version does not exist (NotFound names what does).
        After the commit, ``drop_files`` is called with the removed paths no version names now, in a
        second transaction under the name's lock (an ``add_version`` of the name waits for it)."""
        removed = self._remove_rows(name, version)
        paths = sorted({v.path for v in removed})
        if drop_files is not None and paths:
            self.drop_unnamed(name, paths, drop_files)
        return removed

    def drop_unnamed(self, name: str, paths: Sequence[str], drop_files: Callable[[list[str]], None]) -> None:
        """Call ``drop_files`` with those of ``paths`` (files of ``name``) that no version names, in
        a transaction under the name's lock (an ``add_version`` of the name waits for it)."""
        with self._writer.begin() as conn:
            self._lock_name(conn, name)
            named = set(
                conn.execute(select(ModelVersionRow.c.path).where(ModelVersionRow.c.path.in_(paths)))
                .scalars()
                .all()
            )
            if set(paths) - named:
                drop_files(sorted(set(paths) - named))

    def _remove_rows(self, name: str, version: int | None) -> list[ModelVersion]:
        with self._writer.begin() as conn:
            self._require_name(conn, name)
            query = select(ModelVersionRow).where(ModelVersionRow.c.name == name)
            if version is not None:
                query = query.where(ModelVersionRow.c.version == version)
            rows = conn.execute(query.order_by(ModelVersionRow.c.version)).all()
            if version is not None and not rows:
                raise NotFound(f"model {name} has no version {version}{self._versions_hint(conn, name)}")
            aliases = self._aliases(conn, name)
            if version is None:
                conn.execute(delete(ModelAliasRow).where(ModelAliasRow.c.name == name))
                conn.execute(delete(ModelVersionRow).where(ModelVersionRow.c.name == name))
                conn.execute(delete(RegisteredModelRow).where(RegisteredModelRow.c.name == name))
            else:
                conn.execute(
                    delete(ModelAliasRow).where(
                        ModelAliasRow.c.name == name, ModelAliasRow.c.version == version
                    )
                )
                conn.execute(
                    delete(ModelVersionRow).where(
                        ModelVersionRow.c.name == name, ModelVersionRow.c.version == version
                    )
                )
                conn.execute(
                    update(RegisteredModelRow)
                    .where(RegisteredModelRow.c.name == name)
                    .values(updated_at=time.time())
                )
        return [_version(r._mapping, aliases) for r in rows]

    def alias_version(self, name: str, alias: str) -> int:
        with self.engine.connect() as conn:
            version = conn.execute(
                select(ModelAliasRow.c.version).where(
                    ModelAliasRow.c.name == name, ModelAliasRow.c.alias == alias
                )
            ).scalar()
            if version is None:
                self._require_name(conn, name)
                known = list(
                    conn.execute(
                        select(ModelAliasRow.c.alias)
                        .where(ModelAliasRow.c.name == name)
                        .order_by(ModelAliasRow.c.alias)
                    ).scalars()
                )
                shown = ", ".join(known) or "none"
                near = closest(alias, known)
                # a misspelt alias is pointed at the one meant; setting it is the fix only when none is near
                fix = (
                    f"did you mean {name}@{near}?"
                    if near is not None
                    else f"set one with `phalanx models alias {name}@{alias} VERSION`"
                )
                raise NotFound(f"model {name} has no alias {alias!r} (aliases: {shown}); {fix}")
        return int(version)

    def latest_version(self, name: str) -> int:
        with self.engine.connect() as conn:
            self._require_name(conn, name)
            latest = conn.execute(
                select(func.max(ModelVersionRow.c.version)).where(ModelVersionRow.c.name == name)
            ).scalar()
        if latest is None:
            raise NotFound(f"model {name} has no version")
        return int(latest)

    def get_version(self, name: str, version: int) -> ModelVersion:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(ModelVersionRow).where(
                    ModelVersionRow.c.name == name, ModelVersionRow.c.version == version
                )
            ).first()
            if row is None:
                self._require_name(conn, name)
                raise NotFound(f"model {name} has no version {version}{self._versions_hint(conn, name)}")
            aliases = self._aliases(conn, name)
        return _version(row._mapping, aliases)

    def versions(self, name: str) -> list[ModelVersion]:
        with self.engine.connect() as conn:
            self._require_name(conn, name)
            rows = conn.execute(
                select(ModelVersionRow)
                .where(ModelVersionRow.c.name == name)
                .order_by(ModelVersionRow.c.version)
            ).all()
            aliases = self._aliases(conn, name)
        return [_version(r._mapping, aliases) for r in rows]

    def model_project(self, name: str) -> str:
        with self.engine.connect() as conn:
            self._require_name(conn, name)
            found = conn.execute(
                select(RegisteredModelRow.c.project).where(RegisteredModelRow.c.name == name)
            ).scalar()
        return str(found)

    def list_models(self, projects: Sequence[str] | None = None) -> list[RegisteredModel]:
        query = select(RegisteredModelRow).order_by(RegisteredModelRow.c.name)
        if projects is not None:
            query = query.where(RegisteredModelRow.c.project.in_(list(projects)))
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
            latest = dict(
                conn.execute(
                    select(ModelVersionRow.c.name, func.max(ModelVersionRow.c.version)).group_by(
                        ModelVersionRow.c.name
                    )
                ).all()
            )
            aliases: dict[str, dict[str, int]] = {}
            for name, alias, version in conn.execute(
                select(ModelAliasRow.c.name, ModelAliasRow.c.alias, ModelAliasRow.c.version).order_by(
                    ModelAliasRow.c.alias
                )
            ).all():
                aliases.setdefault(name, {})[alias] = int(version)
        return [
            RegisteredModel(
                name=m["name"],
                description=m["description"],
                tags=dict(m["tags"] or {}),
                created_at=m["created_at"],
                updated_at=m["updated_at"],
                latest_version=latest.get(m["name"]),
                aliases=aliases.get(m["name"], {}),
                project=m["project"],
            )
            for m in (r._mapping for r in rows)
        ]

    def update(
        self,
        name: str,
        version: int | None,
        *,
        description: str | None = None,
        tags: Mapping[str, str | None] | None = None,
    ) -> None:
        """Set the description and/or merge tags (a None value removes a tag) of the name, or of one
        version when ``version`` is given."""
        table: Table = RegisteredModelRow if version is None else ModelVersionRow
        where = [table.c.name == name] + ([] if version is None else [ModelVersionRow.c.version == version])
        with self._writer.begin() as conn:
            current = conn.execute(select(table.c.tags).where(*where)).first()
            if current is None:
                raise NotFound(f"no model {name}" + ("" if version is None else f" version {version}"))
            values: dict[str, Any] = {}
            if description is not None:
                values["description"] = description
            if tags:
                merged = {**(current[0] or {}), **tags}
                values["tags"] = {k: v for k, v in merged.items() if v is not None}
            if version is None:
                values["updated_at"] = time.time()
            if values:
                conn.execute(update(table).where(*where).values(values))

    def _lock_name(self, conn: Any, name: str) -> None:
        """Hold ``name``'s registry lock until ``conn``'s transaction ends: a PostgreSQL advisory lock
        of the name (a hash clash only makes two names wait for each other); a SQLite writer already
        holds the database's one write lock (BEGIN IMMEDIATE)."""
        if self.dialect == "postgresql":
            conn.execute(
                text(f"SELECT pg_advisory_xact_lock({_LOCK_SPACE}, hashtext(:name))"), {"name": name}
            )

    def _require_name(self, conn: Any, name: str) -> None:
        if (
            conn.execute(select(RegisteredModelRow.c.name).where(RegisteredModelRow.c.name == name)).scalar()
            is None
        ):
            raise NotFound(
                f"no registered model {name!r}; register one with "
                f"`phalanx models register EXPERIMENT --name {name}` (`phalanx models ls` lists them)"
            )

    def _versions_hint(self, conn: Any, name: str) -> str:
        numbers = list(
            conn.execute(
                select(ModelVersionRow.c.version)
                .where(ModelVersionRow.c.name == name)
                .order_by(ModelVersionRow.c.version)
            ).scalars()
        )
        return f" (versions: {', '.join(map(str, numbers)) or 'none'})"

    def _aliases(self, conn: Any, name: str) -> dict[int, list[str]]:
        found: dict[int, list[str]] = {}
        for alias, version in conn.execute(
            select(ModelAliasRow.c.alias, ModelAliasRow.c.version)
            .where(ModelAliasRow.c.name == name)
            .order_by(ModelAliasRow.c.alias)
        ).all():
            found.setdefault(int(version), []).append(alias)
        return found


def _version(m: Any, aliases: dict[int, list[str]]) -> ModelVersion:
    return ModelVersion(
        name=m["name"],
        version=int(m["version"]),
        experiment_id=m["experiment_id"],
        source=m["source"],
        path=m["path"],
        sha256=m["sha256"],
        size=int(m["size"]),
        signature=dict(m["signature"] or {}),
        lineage=dict(m["lineage"] or {}),
        description=m["description"],
        tags=dict(m["tags"] or {}),
        created_at=m["created_at"],
        aliases=aliases.get(int(m["version"]), []),
    )
