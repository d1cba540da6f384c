"""One rule for the size of an experiment on this machine: cores count the cpu limits (the local
engine pins them), or the request where no limit is given. `phalanx check`, `--dry-run` and the
early refusal agree, and each names what it counted."""

from __future__ import annotations

import os

from .conftest import Phalanx


def _seed_like(phalanx: Phalanx) -> str:
    """Two replicas whose requests fit this machine but whose limits (pinned) do not: the seeds'
    `requests: 1, limits: 2` shape, scaled to the cores here."""
    cores = len(os.sched_getaffinity(0))
    return str(
        phalanx.spec(
            f"""
            version: 1
            kind: experiment
            framework: pytorch
            environment:
              resources:
                cpu: {{requests: 1, limits: {cores}}}
              replicas:
                n_workers: 1
                default_worker:
                  resources:
                    cpu: {{requests: 1, limits: {cores}}}
            run:
              cmd: echo ran
            """
        )
    )


def test_check_dry_run_and_run_count_the_cpu_limits_and_say_so(phalanx: Phalanx) -> None:
    spec = _seed_like(phalanx)
    checked = phalanx.cli("check", "-f", spec)
    assert checked.returncode == 0, checked.stderr  # the file may be meant for a cluster: a note
    assert "would refuse it" in checked.stderr and "counted from the cpu limits" in checked.stderr
    for args in (("--dry-run",), ()):
        refused = phalanx.cli("run", "-f", spec, *args)
        assert refused.returncode == 2, refused.stdout
        assert "counted from the cpu limits" in refused.stderr and "lower the cpu limits" in refused.stderr
        assert "Traceback" not in refused.stderr
    assert not (phalanx.home / "phalanx.db").exists()


def test_a_request_without_a_limit_is_counted_as_the_request(phalanx: Phalanx) -> None:
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        environment:
          resources:
            cpu: {requests: 4096}
        run:
          cmd: echo ran
        """
    )
    checked = phalanx.cli("check", "-f", str(spec))
    assert "counted from the cpu requests" in checked.stderr
    refused = phalanx.cli("run", "-f", str(spec), "--dry-run")
    assert refused.returncode == 2 and "lower the cpu requests" in refused.stderr
