"""Who reads an experiment's data, and with which credentials (issue 36).

A run on this machine by its user (``reader`` None) reads every datastore and dataset with that
user's own credentials (the AWS variables or profile of its environment), as always. A server's
boxed run of project P reads only P's data and what an admin shared, and an object store with P's
credentials: the datastore's AWS profile when an admin gave it one, else P's secrets
(`phalanx secret set P AWS_ACCESS_KEY_ID`, AWS_SECRET_ACCESS_KEY, optionally AWS_SESSION_TOKEN and
AWS_ENDPOINT_URL), never the server's own environment. Data of another project is answered as if
it did not exist, as its experiments are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from phalanx.config import Settings
from phalanx.errors import NotFound, UsageError

R = TypeVar("R")

_AS_OPTIONS = {  # project secret -> s3fs option
    "AWS_ACCESS_KEY_ID": "key",
    "AWS_SECRET_ACCESS_KEY": "secret",
    "AWS_SESSION_TOKEN": "token",
    "AWS_ENDPOINT_URL": "endpoint_url",
}


class Access:
    """One input's reader: None (this machine's user) or a server's boxed run's project."""

    def __init__(self, store: Any, settings: Settings, reader: str | None) -> None:
        self.store = store
        self.settings = settings
        self.reader = reader
        self.profile: str | None = None  # the datastore's AWS profile, when it names one

    def find(self, lookup: Callable[[], R], what: str) -> R:
        """The record ``lookup`` finds, when this reader may read it; NotFound as for a name that
        does not exist. A project's reader is told no more of a missing name either: what the
        catalog says of one (the nearest name, the names there are, another project's versions)
        may be another project's."""
        try:
            record = lookup()
        except NotFound:
            if self.reader is None:
                raise
            raise self._missing(what) from None
        return self.check(record, what)

    def check(self, record: R, what: str) -> R:
        """``record`` when this reader may read it; NotFound as for a name that does not exist."""
        from phalanx.store.catalog import readable_by  # the store's SQL: only once data is read

        if self.reader is None or readable_by(record, self.reader):  # type: ignore[arg-type]
            return record
        raise self._missing(what)

    def _missing(self, what: str) -> NotFound:
        return NotFound(f"no {what} in project {self.reader}, nor shared with it")

    def credentials(self, url: str) -> dict[str, Any] | None:
        """fsspec options naming the credentials to read ``url`` with; None: the environment's (a
        local path, or this machine's user). UsageError when a boxed run's project has none."""
        if self.reader is None or "://" not in url or url.startswith("file://"):
            return None
        if self.profile:
            return {"profile": self.profile}
        from phalanx.store import secrets  # the secrets extra (cryptography): only for an object store

        held = secrets.environment(self.store, self.settings.home, self.reader)
        options = {option: held[name] for name, option in _AS_OPTIONS.items() if held.get(name)}
        if "key" in options and "secret" in options:
            return options
        raise UsageError(
            f"{url}: project {self.reader} has no credentials to read it; set them with `phalanx secret set "
            f"{self.reader} AWS_ACCESS_KEY_ID` and AWS_SECRET_ACCESS_KEY, or give the datastore an AWS "
            "profile (`phalanx datastore add ... --profile NAME`): a server's runs never read with the "
            "server's own"
        )
