"""A follower of a server-run experiment (its build's console, then its replicas') outlives a server
restart: it says so once, keeps its offsets (no console line twice, none missed) and ends with the
experiment's status."""

from __future__ import annotations

import io
from typing import Any

import pytest

from phalanx.apiclient import Client, Unavailable
from phalanx.following import ExperimentFollower, Patience


class FakeServerClient(Client):
    """A server's answers in memory (no HTTP); ``down`` reads raise Unavailable as a restart does."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:9", None)
        self.lines = ["epoch 1", "epoch 2"]
        self.build = ["Successfully installed tinypkg-1.0"]  # the environment build's console
        self.status = "running"
        self.down = 0

    def get(self, path: str, **query: Any) -> Any:
        if self.down:
            self.down -= 1
            raise Unavailable("cannot reach the server at http://127.0.0.1:9 (connection refused)")
        if path.endswith("/logs"):
            start, source = int(query["offset"]), query["replica"]
            lines = {"master": self.lines, "build": self.build}.get(source, [])
            return {
                "lines": [{"replica": source, "text": t} for t in lines[start:]],
                "next_offset": len(lines),
            }
        return {"id": "e1", "status": self.status, "replicas": [{"name": "master"}]}


def test_a_follower_prints_every_line_once_across_a_restart_and_says_so() -> None:
    client, out, said = FakeServerClient(), io.StringIO(), io.StringIO()
    follower = ExperimentFollower(client, "e1", said.write)
    assert (follower.look(out) or {}).get("status") == "running"
    client.down = 3  # the server restarts: three reads fail
    assert [follower.look(out) for _ in range(3)] == [None, None, None]
    client.lines += ["epoch 3"]
    client.status = "succeeded"
    assert (follower.look(out) or {}).get("status") == "succeeded"
    assert out.getvalue() == (
        "[build] Successfully installed tinypkg-1.0\n[master] epoch 1\n[master] epoch 2\n[master] epoch 3\n"
    )
    lines = said.getvalue().splitlines()
    assert len(lines) == 2 and "still following experiment e1" in lines[0] and "answers again" in lines[1]


def test_a_follower_gives_up_past_its_patience_saying_the_work_goes_on() -> None:
    patience = Patience("experiment e1", None, seconds=0.0)

    def refused() -> None:
        raise Unavailable("cannot reach the server")

    assert patience.attempt(refused) is None
    with pytest.raises(Unavailable, match="runs on the server regardless"):
        patience.attempt(refused)
