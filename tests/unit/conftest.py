"""tests/unit is the fast loop: it starts no process. Every way a Python program starts one (the
subprocess module, multiprocessing, os.fork/posix_spawn/system, pty) goes through one of the
functions patched here, so a unit test that starts a process fails at once with a message that
says where it belongs, instead of quietly making `make unit` slow. Tests that start processes
live in tests/integration/ (docs/testing.md)."""

from __future__ import annotations

import _posixsubprocess  # type: ignore[import-not-found]
import contextlib
import multiprocessing.forkserver
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from phalanx.store import accounts as store_accounts
from phalanx.store.sql import engine as sql_engine
from phalanx.store.sql import store as sql_store
from tests.support.schema_template import SchemaTemplate

_MESSAGE = (
    "a unit test started a process ({how}); tests/unit starts none: move the test to "
    "tests/integration/ (or use a fake in place of the process)"
)


def _refuse(how: str) -> Any:
    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError(_MESSAGE.format(how=how))

    return refuse


# (module, attribute): subprocess keeps its own reference to _posixsubprocess.fork_exec, and
# multiprocessing's spawn and forkserver call the module's one; os.fork covers the fork context. A
# forkserver that an earlier integration test started forks for us from its own process, so asking
# it for a child is refused too.
_SPAWNERS: list[tuple[Any, str]] = [
    (multiprocessing.forkserver, "connect_to_new_process"),
    (subprocess, "_fork_exec"),
    (_posixsubprocess, "fork_exec"),
    (os, "fork"),
    (os, "forkpty"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "system"),
]


@contextlib.contextmanager
def _refusing_processes() -> Iterator[None]:
    saved = [(module, name, getattr(module, name)) for module, name in _SPAWNERS if hasattr(module, name)]
    for module, name, _ in saved:
        setattr(module, name, _refuse(f"{module.__name__}.{name}"))
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


# Around each phase of a unit test, so a module or session fixture that a unit test pulls in is held
# to the same rule as the test. These hooks are dispatched through the item's own hook proxy, which
# calls this conftest's hooks only for the tests under tests/unit, even in a run of the whole suite.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _refusing_processes():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _refusing_processes():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if nextitem is None:
        # the session's end: pytest tears down every session fixture here, including the ones
        # integration tests started (a Slurm cluster, a PostgreSQL server), which stop processes
        return (yield)
    with _refusing_processes():
        return (yield)


@pytest.fixture(scope="session")
def _schema_template(tmp_path_factory: pytest.TempPathFactory) -> SchemaTemplate:
    return SchemaTemplate(tmp_path_factory.mktemp("schema-template"), sql_engine.upgrade)


@pytest.fixture(autouse=True)
def _fresh_stores_from_a_template(monkeypatch: pytest.MonkeyPatch, _schema_template: SchemaTemplate) -> None:
    """A new SQLite store starts as a copy of one migrated in this session, not migrated again: the
    same file, without the migrations' cost in several hundred tests (tests/support/schema_template.py).
    The migrations themselves are tested in tests/unit/store/test_migrations.py and wherever a test
    opens a database it set up itself."""
    monkeypatch.setattr(sql_store, "upgrade", _schema_template.upgrade)


def _cheapest_argon2() -> Any:
    from pwdlib import PasswordHash
    from pwdlib.hashers.argon2 import Argon2Hasher

    # argon2's own "cheapest" profile (argon2.profiles.CHEAPEST): the same algorithm and hash format
    return PasswordHash((Argon2Hasher(time_cost=1, memory_cost=8, parallelism=1),))


@pytest.fixture(autouse=True)
def _cheap_password_hashing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Passwords are hashed with argon2id at its cheapest cost: the product's parameters (pwdlib's
    recommended: 64 MiB, 3 passes) cost 0.2-0.5 s a hash, on purpose, and the account tests hash and
    check dozens. A test that asks for the ``real_password_hashing`` fixture keeps them
    (tests/unit/store/test_accounts.py pins them)."""
    if "real_password_hashing" not in request.fixturenames:
        monkeypatch.setattr(store_accounts, "_hasher", _cheapest_argon2)


@pytest.fixture
def real_password_hashing() -> None:
    """Hash passwords with the product's own argon2 parameters in this test (see above)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The PostgreSQL variants of the store tests start a server: they run from
    tests/integration/store/test_pg_*.py, which re-collect these modules (docs/testing.md)."""
    here = Path(__file__).parent
    moved = [i for i in items if i.get_closest_marker("postgres") and i.path.is_relative_to(here)]
    again = here.parent / "integration" / "store"
    missing = sorted(
        {
            str(i.path.relative_to(here.parent.parent))
            for i in moved
            if not (again / _pg_name(i.path)).exists()
        }
    )
    if missing:
        raise pytest.UsageError(
            f"{', '.join(missing)}: PostgreSQL variants that would run nowhere; add tests/integration/store/"
            f"test_pg_<module>.py that star-imports the module (see the ones there)"
        )
    if moved:
        config.hook.pytest_deselected(items=moved)
        gone = set(moved)
        items[:] = [i for i in items if i not in gone]


def _pg_name(unit_module: Path) -> str:
    return "test_pg_" + unit_module.name.removeprefix("test_")
