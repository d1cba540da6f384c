"""What the box costs (issue 36): the same experiments submitted to a `phalanx server` that boxes
them (it runs as root: bubblewrap, setpriv, a cgroup per replica, reporting over HTTP) and to one
started with --trust-submitters (the replicas run as the server, as before), rounds interleaved.

    .venv/bin/python bench/box.py [--rounds 5] [--calls 200000] [--json FILE] [--smoke]

- start: submit -> the replica's first statement (a one-replica `python -c` writing time.time()
  into its own folder), median per mode and their ratio;
- DDP: the 2-replica DDP example over gloo (examples/pytorch-ddp, --param epochs=1), submit ->
  succeeded, median per mode and their ratio;
- report call: ns per `report_scalar` inside one replica (``--calls`` calls), median per mode and
  their ratio (a report call never waits on I/O, boxed or not: the ratio should be about 1).

The load average (1 min) is printed with the figures. Not run by the tests (they run --smoke,
whose figures mean nothing); figures are in README.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
CLI = [sys.executable, "-m", "phalanx.cli.main"]
MODES = ("boxed", "unboxed")
REPORTS = """
import time
from phalanx import Task
log = Task.init().get_logger()
n = {calls}
t0 = time.perf_counter_ns()
for i in range(n):
    log.report_scalar("loss", "r", value=1.0 / (i + 1), iteration=i)
open("stamp", "w").write(repr((time.perf_counter_ns() - t0) / n))
"""


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env["PHALANX_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)
    return env


class Server:
    """A `phalanx server` on loopback over its own PHALANX_HOME (``args``: --trust-submitters)."""

    def __init__(self, home: Path, args: list[str]) -> None:
        from phalanx.machine.ports import free_port

        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = open(home / "server.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [*CLI, "server", "--port", self.url.rsplit(":", 1)[1], "--log-level", "warning", *args],
            env=env_for(home),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/api/v1/health", timeout=2):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    said = (home / "server.log").read_text()[-2000:]
                    raise SystemExit(f"the server did not start: {said}") from None
                time.sleep(0.1)
        self.said = (home / "server.log").read_text().splitlines()[1:2]  # its start line: boxed or not

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}/api/v1{path}", timeout=60) as r:
            return json.load(r)

    def submit(self, spec: Path, params: dict[str, Any] | None = None) -> str:
        from phalanx.apiclient import Client
        from phalanx.bundles import pack

        return str(Client(self.url, None).submit(spec, pack(spec.parent), params or {}, 0)["id"])

    def wait_done(self, exp_id: str, timeout: float = 600) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            exp = self.get(f"/experiments/{exp_id}")
            if exp["status"] in ("succeeded", "failed", "stopped"):
                if exp["status"] != "succeeded":
                    raise SystemExit(f"{exp_id} {exp['status']}: {exp.get('reason')}")
                return dict(exp)
            if time.monotonic() > deadline:
                raise SystemExit(f"{exp_id} did not end in time")
            time.sleep(0.05)

    def stamp(self, exp_id: str, timeout: float = 300) -> float:
        """What the replica wrote into its own folder (the work folder the server unpacked)."""
        path = self.home / "server" / "work" / exp_id / "stamp"
        deadline = time.monotonic() + timeout
        while True:
            try:
                text = path.read_text()
                if text:
                    return float(text)
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{exp_id} wrote no stamp within {timeout:.0f} s")
            time.sleep(0.005)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        self.log.close()


def write_spec(folder: Path, name: str, cmd: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yml"
    path.write_text(f"version: 1\nkind: experiment\nproject: bench\nrun:\n  cmd: {json.dumps(cmd)}\n")
    return path


def measure(
    servers: dict[str, Server], work: Path, rounds: int, calls: int, with_ddp: bool = True
) -> dict[str, dict[str, list[float]]]:
    kinds = ("start", "ddp", "report") if with_ddp else ("start", "report")
    out: dict[str, dict[str, list[float]]] = {k: {m: [] for m in MODES} for k in kinds}
    ddp = work / "ddp"
    shutil.copytree(REPO / "examples" / "pytorch-ddp", ddp)
    start = write_spec(
        work / "start", "start", "python -c \"import time; open('stamp', 'w').write(repr(time.time()))\""
    )
    (work / "reports" / "reports.py").parent.mkdir(parents=True)
    (work / "reports" / "reports.py").write_text(REPORTS.format(calls=calls))
    reports = write_spec(work / "reports", "reports", "python reports.py")
    for i, mode in itertools.product(range(rounds), MODES):
        server = servers[mode]
        t0 = time.time()
        exp_id = server.submit(start)
        out["start"][mode].append(server.stamp(exp_id) - t0)
        server.wait_done(exp_id)
        if with_ddp:
            t0 = time.monotonic()
            server.wait_done(server.submit(ddp / "polyaxonfile.yml", {"epochs": 1}))
            out["ddp"][mode].append(time.monotonic() - t0)
        exp_id = server.submit(reports)
        out["report"][mode].append(server.stamp(exp_id))
        server.wait_done(exp_id)
        print(f"\rround {i + 1}/{rounds} {mode}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return out


def summary(figures: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    out = {}
    for what, by_mode in figures.items():
        medians = {mode: statistics.median(values) for mode, values in by_mode.items()}
        out[what] = {**medians, "ratio": medians["boxed"] / medians["unboxed"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--smoke", action="store_true", help="one round, few calls, no DDP: checks the bench runs"
    )
    args = parser.parse_args()
    rounds, calls = (1, 1000) if args.smoke else (args.rounds, args.calls)
    work = Path(tempfile.mkdtemp(prefix="phalanx-bench-box-"))
    servers: dict[str, Server] = {}
    try:
        servers["boxed"] = Server(work / "boxed-home", [])
        servers["unboxed"] = Server(work / "unboxed-home", ["--trust-submitters"])
        for mode, server in servers.items():
            print(f"{mode}: {' '.join(server.said)}", file=sys.stderr)
        figures = measure(servers, work, rounds, calls, with_ddp=not args.smoke)
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    medians = summary(figures)
    result: dict[str, Any] = {
        "load_1min": os.getloadavg()[0],
        "rounds": rounds,
        "calls": calls,
        **medians,
        "raw": figures,
    }
    print(f"load average (1 min) {result['load_1min']:.1f}, {rounds} rounds interleaved")
    for what, unit in (("start", "s"), ("ddp", "s"), ("report", "ns/call")):
        if what not in medians:
            continue
        m = medians[what]
        print(
            f"{what:>7}: boxed {m['boxed']:.3f} {unit}, unboxed {m['unboxed']:.3f} {unit},"
            f" ratio {m['ratio']:.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
