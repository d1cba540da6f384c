"""The model registry's side of the store: the ``RegistryStore`` protocol (names, versions, aliases)
that phalanx.registry uses, and ``registry_store(store)``, the one way to get it. Implemented by the
SQL store (``sql.registry.SqlRegistry``; tables of migration 0007_model_registry_i27)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from phalanx.store.sql.registry import SqlRegistry

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore
    from phalanx.store.registry_records import ModelVersion, RegisteredModel


class RegistryStore(Protocol):
    """Every method is one transaction (``remove`` with ``drop_files``: two); errors are Phalanx errors
    (NotFound names what exists). A name's files are checked and deleted only under that name's lock,
    which ``add_version`` (with ``keep_file``) and ``remove`` (with ``drop_files``) hold for it."""

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
        keeps its project); returns its number. ``keep_file`` is called under the name's lock before
        the row is inserted, to make sure the file the version names is there; ``may_add`` before
        it, with the project the name belongs to (None: a new name), to refuse (by raising)."""
        ...

    def model_project(self, name: str) -> str:
        """The project ``name`` belongs to. NotFound (saying how to register one) if none."""
        ...

    def set_alias(self, name: str, alias: str, version: int) -> int | None:
        """Point ``name@alias`` at ``version`` atomically; returns the version it named before.
        NotFound for a version that does not exist (and the alias is unchanged)."""
        ...

    def delete_alias(self, name: str, alias: str) -> None: ...

    def remove(
        self,
        name: str,
        version: int | None = None,
        *,
        drop_files: Callable[[list[str]], None] | None = None,
    ) -> list[ModelVersion]:
        """Remove one version (and the aliases naming it) or, ``version`` None, the name with every
        version and alias; what was removed. A removed version's number is never given again.
        After the rows' commit, ``drop_files`` is called under the name's lock with the removed paths
        that no version names now (so no ``add_version`` of the name decides on them meanwhile)."""
        ...

    def drop_unnamed(self, name: str, paths: Sequence[str], drop_files: Callable[[list[str]], None]) -> None:
        """Call ``drop_files`` under ``name``'s lock with those of ``paths`` that no version names (a
        refused or failed registration's copy goes so, unless a version of the same bytes names it)."""
        ...

    def alias_version(self, name: str, alias: str) -> int: ...

    def latest_version(self, name: str) -> int: ...

    def get_version(self, name: str, version: int) -> ModelVersion: ...

    def versions(self, name: str) -> list[ModelVersion]: ...

    def list_models(self, projects: Sequence[str] | None = None) -> list[RegisteredModel]:
        """Every registered model, by name; only those of ``projects`` when given."""
        ...

    def update(
        self,
        name: str,
        version: int | None,
        *,
        description: str | None = None,
        tags: Mapping[str, str | None] | None = None,
    ) -> None:
        """Set the description and/or merge tags (None removes one) of a name or one version."""
        ...


def registry_store(store: LocalStore) -> RegistryStore:
    """``store``'s registry tables."""
    return SqlRegistry(store.engine)
