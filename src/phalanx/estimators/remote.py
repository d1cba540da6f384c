"""``Experiment(name, server=URL).submit(estimator)``: send an estimator to a Phalanx server, as
Azure's ``exp.submit(est)`` sends it to a workspace, and follow it there (``RemoteRun``).

The estimator becomes the same experiment file `phalanx run` would read (validated here first, so a
mistake is raised before anything is sent); its ``source_directory`` travels as the code bundle
(``phalanx.bundles``: the snapshot's skips, .gitignore, the cap), with the file at the bundle's top
so the replicas start in that folder, as they do locally. One idempotency key per submit: a retry
after a lost answer never makes a second experiment.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from phalanx.apiclient import Client, quote
from phalanx.bundles import pack
from phalanx.errors import UsageError
from phalanx.runs import RunFailed, RunTimeout
from phalanx.spec.loader import load_spec_text

if TYPE_CHECKING:
    from phalanx.estimators.estimator import Estimator

SPEC_NAME = ".phalanx-estimator.yml"  # at the bundle's top; a name no user file is likely to have
POLL_SECONDS = 0.5
DONE = ("succeeded", "failed", "stopped")


def submit(
    client: Client, config: Estimator, name: str, project: str, tags: Sequence[str], priority: int
) -> RemoteRun:
    """Validate, bundle ``config.source_directory`` and submit to ``config.compute_target`` (the
    server's own machine, or a cluster registered on the server: it answers 400 for one it lacks)."""
    if config.resume_from is not None:
        raise UsageError(
            "resume_from with server=: the checkpoint lives in the server's store; resume there "
            "(`phalanx resume ID --server URL` or the web UI)"
        )
    text = config.to_yaml(name=name, project=project, tags=tuple(tags))
    load_spec_text(text, SPEC_NAME)  # its mistakes, raised before anything is packed or sent
    bundle = pack(config.source_directory)
    # compute_target: "local" (the server's machine) or a cluster registered on the server
    answer = client.submit_text(
        SPEC_NAME, text, bundle, {}, priority, extra={"target": config.compute_target}
    )
    return RemoteRun(client, str(answer["id"]))


class RemoteRun:
    """An experiment on a server: the part of ``phalanx.runs.Run`` a submitter uses, read through
    the server's API (status, details, metrics, following, cancel)."""

    def __init__(self, client: Client, run_id: str) -> None:
        self.client = client
        self.id = run_id

    @property
    def url(self) -> str:
        """The experiment's page in the server's web UI."""
        return f"{self.client.url}/experiments/{self.id}"

    def get_details(self) -> dict[str, Any]:
        return dict(self.client.get(f"/experiments/{quote(self.id)}"))

    def get_status(self) -> str:
        return str(self.get_details()["status"])

    def get_metrics(self, title: str | None = None) -> dict[str, dict[str, dict[str, list[Any]]]]:
        """``{"loss": {"worker 00": {"steps": [...], "values": [...]}}}``, as ``Run.get_metrics``."""
        base = f"/experiments/{quote(self.id)}/metrics"
        titles = [title] if title is not None else list(self.client.get(base)["titles"])
        out: dict[str, dict[str, dict[str, list[Any]]]] = {}
        for t in titles:
            doc = self.client.get(f"{base}/{quote(t)}")
            out[t] = {s: {"steps": v["steps"], "values": v["values"]} for s, v in doc["series"].items()}
        return out

    def cancel(self) -> None:
        """Ask the server to stop it (its supervisor stops every replica, then marks it stopped)."""
        self.client.send("POST", f"/experiments/{quote(self.id)}/stop")

    def wait_for_completion(
        self,
        show_output: bool = False,
        raise_on_error: bool = True,
        timeout: float | None = None,
        *,
        output: IO[str] | None = None,
    ) -> dict[str, Any]:
        """Block until the experiment has ended on the server; return get_details(). With
        ``show_output`` every replica's console is printed as it arrives (`[worker-0] ...`).

        Raises:
            RunFailed (failed or stopped, with ``raise_on_error``), RunTimeout.
        """
        stream = output or sys.stdout
        offsets: dict[str, int] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            details = self.get_details()  # read before the lines: none is missed
            if show_output:
                for replica in details.get("replicas") or []:
                    self._print_new(replica["name"], offsets, stream)
            if details["status"] in DONE:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise RunTimeout(f"experiment {self.id} still {details['status']} after {timeout:g} s")
            time.sleep(POLL_SECONDS)
        if raise_on_error and details["status"] != "succeeded":
            raise RunFailed(self.id, details["status"], details.get("reason"))
        return details

    def _print_new(self, replica: str, offsets: dict[str, int], stream: IO[str]) -> None:
        while True:
            page = self.client.get(
                f"/experiments/{quote(self.id)}/logs",
                replica=replica,
                offset=offsets.get(replica, 0),
                limit=1000,
            )
            for line in page["lines"]:
                stream.write(f"[{line['replica']}] {line['text']}\n")
            stream.flush()
            offsets[replica] = int(page["next_offset"])
            if len(page["lines"]) < 1000:
                return

    def __repr__(self) -> str:
        return f"RemoteRun(id={self.id!r}, server={self.client.url!r})"
