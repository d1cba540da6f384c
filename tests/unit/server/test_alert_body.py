"""What a hook's receiver gets (server/alerting.body_of): the event, the page's address, a `text`
line for any chat's incoming webhook, and Slack's Block Kit `blocks`; what a job wrote (a name, a
reason) is shown as written, never as a Slack link or mention."""

from __future__ import annotations

import json
from typing import Any

from phalanx.server.alerting import body_of
from phalanx.store.alert_records import Due

BASE = "https://phalanx.example/"


def _body(payload: dict[str, Any]) -> dict[str, Any]:
    due = Due("d-1", "https://hooks.slack.example/T/B/X", "s" * 32, payload["event"], json.dumps(payload), 0)
    doc: dict[str, Any] = json.loads(body_of(due, BASE))
    return doc


def test_a_failed_experiment_has_a_headline_its_reason_quoted_its_replica_and_a_button() -> None:
    doc = _body(
        {
            "event": "experiment.failed",
            "experiment_id": "3fa2c01b9e77",
            "name": "resnet",
            "project": "vision",
            "status": "failed",
            "reason": "exited with code 3; last lines:\nTraceback ...\nValueError: bad",
            "replica": "worker-1",
        }
    )
    url = "https://phalanx.example/experiments/3fa2c01b9e77"
    assert doc["url"] == url
    assert doc["text"].startswith("phalanx: experiment resnet (3fa2c01b9e77) of vision failed: exited")
    section, context, actions = doc["blocks"]
    assert section["text"]["text"] == (
        f":x: Experiment *<{url}|resnet>* (`3fa2c01b9e77`) of *vision* failed\n"
        ">exited with code 3; last lines:\n>Traceback ...\n>ValueError: bad"
    )
    assert context["elements"][0]["text"] == "replica worker-1 · delivery d-1"
    (button,) = actions["elements"]
    assert button["url"] == url and button["text"]["text"] == "Open the experiment"


def test_what_a_job_wrote_cannot_become_a_link_or_a_mention() -> None:
    doc = _body(
        {
            "event": "experiment.failed",
            "experiment_id": "3fa2c01b9e77",
            "name": "<https://evil.example|resnet>",
            "project": "vision",
            "status": "failed",
            "reason": "<!channel> see <https://evil.example|the fix> & retry",
        }
    )
    shown = doc["text"] + json.dumps(doc["blocks"])
    assert "<!channel>" not in shown and "<https://evil.example" not in shown
    assert "&lt;!channel&gt; see &lt;https://evil.example|the fix&gt; &amp; retry" in doc["text"]
    assert "|&lt;https://evil.example|resnet&gt;>*" in doc["blocks"][0]["text"]["text"]


def test_a_finished_group_names_its_best_trial_and_a_moved_alias_its_versions() -> None:
    group = _body(
        {
            "event": "group.finished",
            "group_id": "g1a2b3c4d5e6",
            "name": "sweep",
            "project": "vision",
            "status": "succeeded",
            "best": {
                "number": 3,
                "experiment_id": "e1",
                "metric": "loss",
                "value": 0.25,
                "params": {"lr": 0.1},
            },
        }
    )
    assert group["blocks"][0]["text"]["text"].startswith(
        ":white_check_mark: Group *<https://phalanx.example/groups/"
    )
    assert group["blocks"][1]["elements"][0]["text"] == "best: trial 3 (e1) loss 0.25 (lr=0.1) · delivery d-1"
    moved = _body(
        {
            "event": "model.alias",
            "model": "digits",
            "project": "vision",
            "alias": "prod",
            "version": 2,
            "previous": 1,
        }
    )
    assert moved["text"] == "phalanx: model digits of vision: @prod now points at version 2 (was version 1)"
    assert moved["blocks"][0]["text"]["text"] == (
        ":label: Model *<https://phalanx.example/models/digits|digits>* of *vision*: `@prod` now points at"
        " version 2 (was version 1)"
    )
    assert moved["blocks"][-1]["elements"][0]["url"] == "https://phalanx.example/models/digits"
