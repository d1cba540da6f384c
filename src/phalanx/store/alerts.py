"""A project's alert hooks seen through the Store (issue 43 item 5): webhooks told when an
experiment of the project ends (failed, succeeded, stopped) or one of its groups finishes
(group.finished, with its best trial), and the log of what was sent them.

Two typed capabilities, one per side:

* ``AlertBook``: add, list and remove hooks, read a hook's deliveries: what `phalanx alert` and the
  API's ``/projects/P/alerts`` and ``/alerts/ID`` routes call. The server's SQL store answers it
  (``alert_book(store)``), a server's client answers it over HTTP (``remote_store.RemoteAlerts``).
* ``Outbox``: the deliveries due now and the outcome of each try, for the server's deliverer only
  (``server.alerting``).

A delivery is written by the store in the same transaction as the end it reports (``sql.alerts``),
whoever records that end (the supervisor, reconcile, a script's ingested status; a group's
controller, `phalanx group stop`, the server's launcher), so an end is never lost between the row
and the hook, and recorded once however often the end is written again. Tables of migrations
0017_alert_hooks_i43 and 0018_alert_group_finished_i43.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from phalanx.store.alert_records import Delivery, Due, Hook
from phalanx.store.sql.alerts import SqlAlerts

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore


class AlertBook(Protocol):
    """A project's hooks. Each method is one transaction; NotFound names what is missing."""

    def add_hook(
        self, project: str, url: str, events: Sequence[str], secret: str | None, created_by: str | None
    ) -> Hook:
        """A new hook (``check_hook`` first); ``secret`` None: one is generated. The answer is the
        only one that holds the secret."""
        ...

    def hooks(self, projects: Sequence[str] | None = None) -> list[Hook]:
        """Every hook (of ``projects`` when given), oldest first, without secrets."""
        ...

    def hook(self, hook_id: str) -> Hook:
        """One hook without its secret; NotFound if there is none."""
        ...

    def remove_hook(self, hook_id: str) -> None:
        """Remove it; its deliveries not yet made are dropped (their log stays). NotFound if none."""
        ...

    def deliveries(self, hook_id: str, limit: int = 50) -> list[Delivery]:
        """The hook's newest deliveries first, each with its attempts; NotFound for no such hook."""
        ...


class Outbox(Protocol):
    """The server's side of the deliveries (``server.alerting.Deliverer``)."""

    def claim_due(self, now: float, lease: float, limit: int = 20) -> list[Due]:
        """Pending deliveries due by ``now``, each claimed for ``lease`` seconds (another deliverer
        on the same database skips it meanwhile)."""
        ...

    def record_attempt(
        self, delivery_id: str, at: float, status_code: int | None, error: str | None, next_at: float | None
    ) -> None:
        """One try's outcome: delivered (a 2xx ``status_code``), else tried again at ``next_at``, or
        failed for good when ``next_at`` is None."""
        ...


def alert_book(store: LocalStore) -> AlertBook:
    """``store``'s hooks."""
    return SqlAlerts(store.engine)


def outbox(store: LocalStore) -> Outbox:
    """``store``'s deliveries to send."""
    return SqlAlerts(store.engine)
