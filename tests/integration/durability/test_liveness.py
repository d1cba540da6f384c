"""The liveness check (PHALANX_HANG_TIMEOUT): a SIGSTOPped replica fails the experiment within
seconds, and the reason names it, not the peer that waits for it."""

from __future__ import annotations

import time

from tests.integration.local.conftest import Phalanx

from phalanx.domain import ExperimentStatus


def test_a_stalled_replica_is_named_and_fails_the_experiment(phalanx: Phalanx) -> None:
    phalanx.spec(
        """
        import os, signal, time
        print("started", flush=True)
        if os.environ["PHALANX_REPLICA"] == "worker-0":
            os.kill(os.getpid(), signal.SIGSTOP)   # hangs (as a worker that stops calling all_reduce)
        time.sleep(600)                            # the master waits for it, idle
        """,
        name="hang.py",
    )
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          replicas:
            n_workers: 1
        run:
          cmd: python hang.py
        """
    )
    phalanx.env["PHALANX_HANG_TIMEOUT"] = "2"
    started = time.monotonic()
    done = phalanx.run("run", "-f", str(spec), timeout=120)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    exp = phalanx.only_experiment()
    assert exp.status == ExperimentStatus.FAILED
    assert (exp.reason or "").startswith("worker-0 is stopped"), exp.reason
    assert "hang_timeout 2 s" in (exp.reason or "")
    assert took < 30, took
