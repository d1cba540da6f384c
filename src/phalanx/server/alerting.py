"""The server's deliverer of alert hooks (docs/alerts.md): POSTs each delivery the store queued with
an experiment's or a group's end or a moved model alias (``store.alerts.Outbox``), signed, and
tries again with back-off.

Why a thread of the server and an outbox in the store: whoever records an end (a supervisor, the
launcher's reconcile, a script's ingested status) writes the delivery in the same transaction, so a
crash between the two loses nothing, and no request waits on a receiver. The thread claims what is
due (a lease: a server killed mid-send sends again after it), sends it, and records the try; a
non-2xx answer or no answer is tried again after ``backoff * 2**(n-1)`` seconds, ``attempts`` tries
in all. A delivery keeps its id on every try (``X-Phalanx-Delivery``), so a receiver that saw one
already can tell. A failure of the loop is logged, never raised.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from phalanx._version import __version__
from phalanx.server.hook_guard import HookGuard, HookRefused
from phalanx.store.alert_records import MODEL_ALIAS, Due, shown_url
from phalanx.store.alerts import Outbox
from phalanx.store.outages import STORAGE_ERRORS

log = logging.getLogger(__name__)

SIGNATURE, DELIVERY, EVENT = "X-Phalanx-Signature", "X-Phalanx-Delivery", "X-Phalanx-Event"


@dataclass(frozen=True)
class Retry:
    """How deliveries are tried: how many times, the first wait (doubled after each failure), how
    long a receiver may take, and how often the outbox is read."""

    attempts: int = 5
    backoff: float = 10.0
    timeout: float = 10.0
    poll: float = 2.0

    def next_at(self, now: float, tried: int) -> float | None:
        """When to try again after ``tried`` tries failed; None: never."""
        return None if tried >= self.attempts else now + self.backoff * 2 ** (tried - 1)


def sign(secret: str, body: bytes) -> str:
    """The ``X-Phalanx-Signature`` of ``body``: ``sha256=`` and the hex HMAC-SHA256 under the hook's
    secret (GitHub's scheme: a receiver recomputes it and compares with ``hmac.compare_digest``)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


# how a block's headline starts, by the status or notice it tells
_EMOJI = {
    "failed": ":x:",
    "succeeded": ":white_check_mark:",
    "stopped": ":octagonal_sign:",
    "stalled": ":hourglass_flowing_sand:",
    "straggling": ":turtle:",
    "waiting": ":hourglass:",
}
_SECTION_MAX = 2900  # Slack takes 3,000 characters in a section's text


def slack_text(text: str) -> str:
    """``text`` as Slack's mrkdwn shows it as written: ``&``, ``<`` and ``>`` escaped, so a name or
    a reason a job wrote cannot become a link or a mention (``<https://...|click>``, ``<!channel>``)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _blocks(headline: str, detail: str | None, context: list[str], url: str, button: str) -> list[Any]:
    """Slack's Block Kit for one alert: the headline (mrkdwn), the detail quoted, what else is known
    in small print, and a button to the page (all of it escaped already)."""
    text = headline + ("\n" + "\n".join(f">{line}" for line in detail.splitlines()) if detail else "")
    blocks: list[Any] = [{"type": "section", "text": {"type": "mrkdwn", "text": text[:_SECTION_MAX]}}]
    if context:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(context)}]})
    blocks.append(
        {
            "type": "actions",
            "elements": [{"type": "button", "text": {"type": "plain_text", "text": button}, "url": url}],
        }
    )
    return blocks


def body_of(due: Due, public_url: str) -> bytes:
    """What is POSTed: the event as recorded, the address of its experiment (or group, or model) on
    this server, a ``text`` line that Slack's and Mattermost's incoming webhooks show as it is, and
    ``blocks`` that Slack shows richer (a receiver that does not read them ignores them)."""
    doc = json.loads(due.payload)
    doc["delivery"] = due.id
    base = public_url.rstrip("/")
    if doc["event"] == MODEL_ALIAS:
        doc["url"] = f"{base}/models/{urllib.parse.quote(doc['model'], safe='')}"
        was = "" if doc["previous"] is None else f" (was version {doc['previous']})"
        doc["text"] = slack_text(
            f"phalanx: model {doc['model']} of {doc['project']}: @{doc['alias']} now points at version"
            f" {doc['version']}{was}"
        )
        model, alias = slack_text(doc["model"]), slack_text(doc["alias"])
        headline = (
            f":label: Model *<{doc['url']}|{model}>* of *{slack_text(doc['project'])}*: `@{alias}` now"
            f" points at version {doc['version']}{was}"
        )
        doc["blocks"] = _blocks(headline, None, [f"delivery {due.id}"], doc["url"], "Open the model")
        return json.dumps(doc, sort_keys=True).encode()
    about_group = "group_id" in doc  # group.finished; else an experiment's end or notice
    kind, subject = ("group", doc["group_id"]) if about_group else ("experiment", doc["experiment_id"])
    doc["url"] = f"{base}/{kind}s/{subject}"
    why = f": {doc['reason']}" if doc.get("reason") else ""
    text = f"phalanx: {kind} {doc['name']} ({subject}) of {doc['project']} {doc['status']}{why}"
    context = [f"replica {slack_text(doc['replica'])}"] if doc.get("replica") else []
    best = doc.get("best")
    if about_group and best:
        shown = ", ".join(f"{k}={v}" for k, v in best["params"].items())
        trial = f"trial {best['number']} ({best['experiment_id']})"
        text += f"; best: {trial} {best['metric']} {best['value']:.4g} ({shown})"
        context.append(slack_text(f"best: {trial} {best['metric']} {best['value']:.4g} ({shown})"))
    doc["text"] = slack_text(text)
    headline = (
        f"{_EMOJI.get(str(doc['status']), ':information_source:')} {kind.capitalize()}"
        f" *<{doc['url']}|{slack_text(str(doc['name']))}>* (`{subject}`) of *{slack_text(doc['project'])}*"
        f" {slack_text(str(doc['status']))}"
    )
    reason = slack_text(str(doc["reason"])) if doc.get("reason") else None
    doc["blocks"] = _blocks(
        headline, reason, [*context, f"delivery {due.id}"], doc["url"], f"Open the {kind}"
    )
    return json.dumps(doc, sort_keys=True).encode()


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _said(text: str) -> str:
    """Why a try failed, as the delivery log keeps it: one line of at most 500 characters (a
    receiver's reason phrase is its own to choose, NUL bytes included)."""
    return _CONTROL.sub(" ", text)[:500]


class Deliverer:
    """Sends what ``outbox`` has due, in a daemon thread (``start``/``stop``), or once (``run_once``)."""

    def __init__(
        self,
        outbox: Outbox,
        public_url: str,
        retry: Retry | None = None,
        clock: Callable[[], float] = time.time,
        guard: HookGuard | None = None,
    ) -> None:
        self.outbox = outbox
        self.public_url = public_url
        self.retry = retry or Retry()
        self.guard = guard or HookGuard()
        self.clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="phalanx-alerts", daemon=True)

    def start(self) -> Deliverer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.retry.timeout + 5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except STORAGE_ERRORS as exc:  # the database away (an outage): one line, not a traceback
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                log.warning(
                    "alerts: the store is unavailable (%s: %s); trying again", type(exc).__name__, first
                )
            except Exception:  # a bug: the next round tries again
                log.exception("alerts: sending the due deliveries failed; trying again")
            self._stop.wait(self.retry.poll)

    def run_once(self) -> int:
        """Send every delivery due now, once each; how many were tried."""
        lease = self.retry.timeout * 2 + 30  # a try in flight is not claimed again meanwhile
        due = self.outbox.claim_due(self.clock(), lease)
        for d in due:
            status, error = self._post(d)
            now = self.clock()
            ok = status is not None and 200 <= status < 300
            self.outbox.record_attempt(
                d.id, now, status, error, None if ok else self.retry.next_at(now, d.attempts + 1)
            )
            if not ok:
                log.warning("alerts: delivery %s of %s to %s: %s", d.id, d.event, shown_url(d.url), error)
        return len(due)

    def _post(self, due: Due) -> tuple[int | None, str | None]:
        """The receiver's HTTP status and, unless it was a 2xx, why it failed."""
        body = body_of(due, self.public_url)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"phalanx/{__version__}",
            SIGNATURE: sign(due.secret, body),
            DELIVERY: due.id,
            EVENT: due.event,
        }
        request = urllib.request.Request(due.url, data=body, headers=headers, method="POST")
        try:
            with self.guard.opener(due.url).open(request, timeout=self.retry.timeout) as answer:
                return int(answer.status), None
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                return exc.code, _said(
                    f"the receiver answered {exc.code} {exc.reason} (redirects are not followed)"
                )
            return exc.code, _said(f"the receiver answered {exc.code} {exc.reason}")
        except HookRefused as exc:
            return None, _said(f"not sent: {exc}")
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, HookRefused):
                return None, _said(f"not sent: {exc.reason}")
            return None, _said(f"no answer: {type(exc).__name__}: {exc}")
        except Exception as exc:  # anything a URL or a socket raises is this try's failure, never the round's
            return None, _said(f"no answer: {type(exc).__name__}: {exc}")
