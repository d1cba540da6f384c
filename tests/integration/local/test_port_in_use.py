"""A replica that cannot bind its port fails with a reason that says "address in use", not only an
exit code; when the port is the rendezvous port Phalanx probed for it (another process can take it
before torch's TCPStore binds it, see phalanx.machine.ports), the group starts again on new ports,
not counted as a restart. The tests hold the port themselves, so the failure is certain."""

from __future__ import annotations

import socket

import pytest

from .conftest import Phalanx

# on its first attempt the master holds its MASTER_PORT before torch binds it, as another process
# of the machine could between Phalanx's probe and the bind
TAKEN_FIRST = """
import os, socket, sys
from pathlib import Path
import torch.distributed as dist

port = int(os.environ["MASTER_PORT"])
tried = Path(sys.argv[1])
first = not tried.exists()
with tried.open("a") as f:
    f.write(f"{port}\\n")
if first:
    held = socket.socket()
    held.bind(("127.0.0.1", port))
    held.listen()
dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
print("bound", port)
"""

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
    tried = phalanx.tmp / "tried-ports"
    phalanx.spec(TAKEN_FIRST, name="master.py")
    spec = phalanx.spec(
        f"version: 1\nkind: experiment\nframework: pytorch\nrun:\n  cmd: python master.py {tried}\n"
    )
    done = phalanx.run("run", "-f", str(spec), timeout=300)
    assert done.returncode == 0, done.stderr  # no max_restarts: a counted restart would not be made
    lost, bound = (int(p) for p in tried.read_text().split())
    assert lost != bound and f"bound {bound}" in done.stdout
    said = "starting the group again on new ports (1/3, not counted as a restart)"
    assert said in done.stdout + done.stderr, done.stdout + done.stderr
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
