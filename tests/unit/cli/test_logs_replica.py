"""`phalanx logs ID --replica NAME` reads only a console the experiment has, on both doors (this
machine's store, a server's after `phalanx login`): ``build`` of an experiment that had no build is
refused (exit 2) naming its replicas, as a misspelt replica is with the nearest name; ``build`` of
one that had a build, or is building now, is read. A server's API still answers ``build`` with an
empty page (every follower reads each experiment's build console first)."""

from __future__ import annotations

from phalanx.apiclient import Client
from phalanx.domain import BUILD_CONSOLE, ExperimentStatus
from phalanx.remote_store import RemoteStore
from phalanx.store.base import Store
from tests.support.cli import phalanx_cli
from tests.unit.cli.conftest import TOKEN, Served
from tests.unit.server import fill


def test_logs_of_a_build_the_experiment_never_had_is_refused_naming_its_replicas(door: Store) -> None:
    plain = fill.experiment(door, n_workers=1)  # master, worker-0; no build
    fill.log_lines(door, plain.id, "master", ["hello"])
    done = phalanx_cli("logs", plain.id, "--replica", "build")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"error: experiment {plain.id} had no environment built for it, so it has no build console:"
        " --replica takes one of its replicas (master, worker-0)"
    )
    typo = phalanx_cli("logs", plain.id, "--replica", "mastr")
    assert typo.returncode == 2 and typo.stderr.splitlines()[-1] == (
        f"error: experiment {plain.id} has no replica 'mastr' (it has: master, worker-0);"
        " did you mean 'master'?"
    )
    assert phalanx_cli("logs", plain.id).stdout == "[master] hello\n"  # every console still read
    built = fill.experiment(door, n_workers=0)
    fill.log_lines(door, built.id, BUILD_CONSOLE, ["Successfully installed tinypkg-1.0"])
    read = phalanx_cli("logs", built.id, "--replica", "build")
    assert read.returncode == 0 and "Successfully installed tinypkg-1.0" in read.stdout, read.stderr
    building = fill.experiment(door, n_workers=0, status=ExperimentStatus.BUILDING)  # no line yet
    assert phalanx_cli("logs", building.id, "--replica", "build").returncode == 0


def test_a_servers_api_answers_a_build_console_never_written_with_an_empty_page(served: Served) -> None:
    """An older CLI, ``ExperimentFollower`` and `phalanx logs` over a server read every
    experiment's build console first: the API does not refuse it."""
    plain = fill.experiment(served.store, n_workers=0)
    remote = RemoteStore(Client(served.url, token=TOKEN))
    assert remote.logs(plain.id, replica=BUILD_CONSOLE) == []
