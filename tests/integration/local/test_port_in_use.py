"""A replica that cannot bind its port (the rendezvous port Phalanx probed and torch's TCPStore
binds can be taken in between, see phalanx.machine.ports) fails with a reason that says "address in use",
not only an exit code. The test holds the port itself, so the failure is certain."""

from __future__ import annotations

import socket

import pytest

from .conftest import Phalanx

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
    assert reason.startswith("master exited with code 1 (address in use:"), reason
    assert "run it again" in reason, reason
