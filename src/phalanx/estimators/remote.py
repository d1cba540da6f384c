"""``Experiment(name, server=URL).submit(estimator)``: send an estimator to a Phalanx server, as
Azure's ``exp.submit(est)`` sends it to a workspace, and follow it there (``RemoteRun``).

The estimator becomes the same experiment file `phalanx run` would read (validated here first, so a
mistake is raised before anything is sent); its ``source_directory`` travels as the code bundle
(``phalanx.bundles``: the snapshot's skips, .gitignore, the cap), with the file at the bundle's top
so the replicas start in that folder, as they do locally. One idempotency key per submit: a retry
after a lost answer never makes a second experiment.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from phalanx.apiclient import Client, quote
from phalanx.bundles import pack
from phalanx.errors import UsageError
from phalanx.following import DONE, POLL_SECONDS, ExperimentFollower
from phalanx.registry.door import register_version
from phalanx.registry.remote import RemoteRegistry
from phalanx.remote_store import RemoteStore, experiment_of, replica_of
from phalanx.run_api import (
    Metrics,
    RunAPI,
    details_json,
    download_target,
    metrics_json,
    models_json,
    register_source,
    resolve_file,
    write_whole,
)
from phalanx.runs import Run, RunFailed, RunTimeout
from phalanx.spec.loader import load_spec_text

if TYPE_CHECKING:
    from phalanx.estimators.estimator import Estimator

LOG_PAGE = 1000  # console lines a get_logs request asks for
SPEC_NAME = ".phalanx-estimator.yml"  # at the bundle's top; a name no user file is likely to have


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
    """An experiment on a server: the documented Run API (``phalanx.run_api.RunAPI``, the same
    signatures and answers as ``phalanx.runs.Run``), read through the server's API."""

    def __init__(self, client: Client, run_id: str) -> None:
        self.client = client
        self.id = run_id
        self._store = RemoteStore(client)

    @property
    def url(self) -> str:
        """The experiment's page in the server's web UI."""
        return f"{self.client.url}/experiments/{self.id}"

    # -- reading --------------------------------------------------------------------------------

    def get_details(self) -> dict[str, Any]:
        """Status, times, reason, topology and every replica's state and exit code."""
        doc = self.client.get(f"/experiments/{quote(self.id)}")
        replicas = [replica_of(doc["id"], r) for r in doc.get("replicas") or []]
        return details_json(experiment_of(doc), replicas, time.time())

    def get_status(self) -> str:
        """created, queued, starting, running, succeeded, failed or stopped."""
        return self._store.get_experiment(self.id).status

    def get_metrics(self, title: str | None = None) -> Metrics:
        """``{"loss": {"worker 00": {"steps": [...], "values": [...]}}}``, as ``Run.get_metrics``."""
        return metrics_json(self._store.metrics(self.id, title=title))

    def get_models(self) -> list[dict[str, Any]]:
        """The models the run saved (task.save_model): name, format, path, size, replica, metadata."""
        return models_json(self._store.models(self.id))

    def get_file_names(self) -> list[str]:
        """Every file stored for the run on the server, as paths download_file accepts."""
        return [str(p) for p in self.client.get(f"/experiments/{quote(self.id)}/files")]

    def download_file(self, name: str, output_file_path: str | os.PathLike[str] | None = None) -> Path:
        """Copy one stored file from the server to ``output_file_path`` (a file path, or an existing
        folder to put it in; default: the current folder). ``name`` is a path from get_file_names()
        or an artifact's or model's name. Returns the local path. Raises NotFound."""
        named = [(a.name, a.path) for a in self._store.artifacts(self.id)]
        named += [(m.name, m.path) for m in self._store.models(self.id)]
        path = resolve_file(self.id, name, self.get_file_names(), named)
        data = self.client.raw("GET", f"/experiments/{quote(self.id)}/files/{quote_path(path)}")[1]
        return write_whole(download_target(path, output_file_path), [data])

    def get_logs(self, replica: str | None = None) -> list[str]:
        """The console lines recorded so far, ``[replica] text`` each."""
        found: list[str] = []
        offset = 0
        while True:
            page = self.client.get(
                f"/experiments/{quote(self.id)}/logs", replica=replica, offset=offset, limit=LOG_PAGE
            )
            found += [f"[{line['replica']}] {line['text']}" for line in page["lines"]]
            if len(page["lines"]) < LOG_PAGE:
                return found
            offset = int(page["next_offset"])

    def register_model(
        self,
        model_name: str,
        model_path: str | None = None,
        *,
        description: str | None = None,
        tags: Mapping[str, str] | None = None,
        alias: str | None = None,
    ) -> dict[str, Any]:
        """Register the ONNX model the run saved as the next version of ``model_name`` in the
        server's model registry (the server re-runs its ONNX check); as ``Run.register_model``."""
        source = register_source(self.id, model_path, self.get_models())
        registry = RemoteRegistry(self.client)
        return register_version(registry, source, model_name, description, tags, alias)

    # -- waiting and stopping -------------------------------------------------------------------

    def cancel(self, timeout: float = 60.0) -> str:
        """Ask the server to stop it (its supervisor stops every replica, then marks it stopped);
        waits up to ``timeout`` seconds for that and returns the status. A run that has ended is
        left as it is."""
        status = self.get_status()
        if status in DONE:
            return status
        self._store.stop(self.id)
        deadline = time.monotonic() + timeout
        while status not in DONE and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
            status = self.get_status()
        return status

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
        follower = ExperimentFollower(self.client, self.id, sys.stderr.write)
        deadline = None if timeout is None else time.monotonic() + timeout
        details = follower.look((output or sys.stdout) if show_output else None)
        while details is None or details["status"] not in DONE:
            if deadline is not None and time.monotonic() > deadline:
                state = "unreachable" if details is None else details["status"]
                raise RunTimeout(f"experiment {self.id} still {state} after {timeout:g} s")
            time.sleep(POLL_SECONDS)
            details = follower.look((output or sys.stdout) if show_output else None)
        if raise_on_error and details["status"] != "succeeded":
            raise RunFailed(self.id, details["status"], details.get("reason"))
        return self.get_details()

    def __repr__(self) -> str:
        return f"RemoteRun(id={self.id!r}, server={self.client.url!r})"


def quote_path(path: str) -> str:
    """A file's path in a URL: each segment quoted, the slashes kept."""
    return "/".join(quote(part) for part in path.split("/"))


def _same_surface(local: Run, remote: RemoteRun) -> tuple[RunAPI, RunAPI]:
    """Never called: mypy checks here that both doors' runs have the documented Run API."""
    return local, remote
