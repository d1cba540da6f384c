"""A replica that cannot bind its port fails with a reason that says "address in use", not only an
exit code; when the port is the rendezvous port Phalanx probed for it (another process can take it
before torch's TCPStore binds it, see phalanx.machine.ports), the group starts again on new ports,
not counted as a restart. The tests hold the port themselves, so the failure is certain."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from .conftest import Phalanx, wait_for

# the master's MASTER_PORT is written down before torch binds it; on the first attempt the master
# waits until the test has taken that port (as another process of the machine could between
# Phalanx's pick and the bind), then fails binding it; ``twice``: it holds the port itself instead
MASTER = """
import os, socket, sys, time
from pathlib import Path
import torch.distributed as dist

port = int(os.environ["MASTER_PORT"])
tried, go, twice = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "twice"
first = not tried.exists()
with tried.open("a") as f:
    f.write(f"{port}\\n")
if first and twice:
    held = socket.socket()
    held.bind(("127.0.0.1", port))
    held.listen()
elif first:
    while not go.exists():
        time.sleep(0.05)
dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
print("bound", port)
"""


def _master(phalanx: Phalanx, how: str) -> tuple[Path, Path, Path]:
    """(the file, where the master writes its ports, the file that lets its first attempt bind)."""
    tried, go = phalanx.tmp / "tried-ports", phalanx.tmp / "go"
    phalanx.spec(MASTER, name="master.py")
    cmd = f"python master.py {tried} {go} {how}"
    spec = phalanx.spec(f"version: 1\nkind: experiment\nframework: pytorch\nrun:\n  cmd: {cmd}\n")
    return spec, tried, go


BINDS = {
    "socket": "import socket, sys; socket.socket().bind(('127.0.0.1', int(sys.argv[1])))",
    "torch": "import sys, torch.distributed as d; d.TCPStore('127.0.0.1', int(sys.argv[1]), is_master=True)",
}


@pytest.mark.parametrize("binder", sorted(BINDS))
def test_a_replica_whose_port_is_taken_fails_saying_address_in_use(phalanx: Phalanx, binder: str) -> None:
    if binder == "torch":
        pytest.importorskip("torch")
    phalanx.spec(BINDS[binder], name="bind.py")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        spec = phalanx.spec(f"version: 1\nkind: experiment\nrun:\n  cmd: python bind.py {port}\n")
        done = phalanx.run("run", "-f", str(spec), timeout=180)
    assert done.returncode == 1, done.stderr
    reason = phalanx.only_experiment().reason or ""
    # a port the replica chose itself: its own failure, not Phalanx's lost probe, so no new group
    said = "master exited with code 1 (address in use: a port it binds was taken by another process)"
    assert reason.startswith(said), reason
    assert len(phalanx.store().attempts(phalanx.only_experiment().id)) == 1


def test_a_group_whose_probed_rendezvous_port_was_taken_starts_again_on_new_ports(phalanx: Phalanx) -> None:
    pytest.importorskip("torch")
    spec, tried, go = _master(phalanx, "taken")
    run = phalanx.start("run", "-f", str(spec))
    lost = int(wait_for(lambda: tried.exists() and tried.read_text().split(), what="its MASTER_PORT")[0])
    with socket.socket() as taken:  # another process takes the port Phalanx picked for the master
        taken.bind(("127.0.0.1", lost))
        taken.listen()
        go.touch()
        out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err  # no max_restarts: a counted restart would not be made
    first_port, bound = (int(p) for p in tried.read_text().split())
    assert first_port == lost != bound and f"bound {bound}" in out
    said = "starting the group again on new ports (1/3, not counted as a restart)"
    assert said in out + err, out + err
    exp = phalanx.only_experiment()
    assert exp.status == "succeeded"
    first, second = phalanx.store().attempts(exp.id)
    assert (first["kind"], first["status"], second["kind"], second["status"]) == (
        "start",
        "failed",
        "restart",
        "succeeded",
    )
    assert f"address in use: port {lost}, which Phalanx picked for the rendezvous" in first["reason"], first


def test_a_master_that_binds_its_own_port_twice_fails_as_its_own_mistake(phalanx: Phalanx) -> None:
    pytest.importorskip("torch")
    spec, tried, _ = _master(phalanx, "twice")
    done = phalanx.run("run", "-f", str(spec), timeout=300)
    assert done.returncode == 1, done.stderr  # free once it ended: its own, not a lost probe
    [attempt] = phalanx.store().attempts(phalanx.only_experiment().id)
    said = "master exited with code 1 (address in use: a port it binds was taken by another process)"
    assert attempt["reason"].startswith(said), attempt
    assert len(tried.read_text().split()) == 1
