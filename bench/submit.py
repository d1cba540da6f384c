"""Submitting through the server: how long from submit to the first replica's start, through a
`phalanx server` versus `phalanx run --detach` on the machine itself, and the server queue's
hand-over gap (a slot frees -> the next experiment starts) against ClearML's agent poll, in one run.

    .venv/bin/python bench/submit.py [--rounds 8] [--n 20] [--baseline-src DIR] [--json FILE] [--smoke]

- latency: one one-replica experiment (`python -c` writing time.time() to a file: the replica's own
  start) at a time, rounds interleaved server, local, server, local... so both see the same load.
  server = `Client.submit` (the file's folder bundled, POSTed; the server validates, unpacks and
  starts a detached supervisor) until the replica writes its time; local = the `phalanx run
  --detach` process started until the same. Each mode has its own PHALANX_HOME; the load average
  (1 min) is printed with the figures, as they depend on it. ``--baseline-src`` (another checkout's
  src/) adds its `run --detach` to every round, with a home of its own: a change's effect, same load.
- hand-over: a blocker submitted through the server holds every core; N trivial experiments, each
  asking for every core (so one at a time), are submitted and wait in the queue; the blocker is
  released. Gap = next started_at - previous finished_at (both written by the supervisors). The
  anchor is clearml-agent's minimum poll of its queue, 5 s (a slot that frees waits for the next
  poll: 2.5 s on average, 5 s at worst, plus the task's own start).

Not run by the tests (they run --smoke, whose figures mean nothing); figures are in README.md.
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
BASELINE = "local @baseline"
CLEARML_POLL_S = 5.0  # clearml-agent: the queue poll interval cannot be set below 5 s


def env_for(home: Path, src: Path = REPO / "src") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env["PHALANX_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH")) if p)
    return env


def write_spec(folder: Path, name: str, cmd: str, cores: int | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    resources = f"environment:\n  resources:\n    cpu: {{limits: {cores}}}\n" if cores else ""
    path = folder / f"{name}.yml"
    path.write_text(f"version: 1\nkind: experiment\n{resources}run:\n  cmd: {json.dumps(cmd)}\n")
    return path


def stamp_cmd(path: Path) -> str:
    return f"python -c \"import time; open('{path}', 'w').write(repr(time.time()))\""


def wait_file(path: Path, timeout: float = 300) -> float:
    deadline = time.monotonic() + timeout
    while True:
        try:
            text = path.read_text()
            if text:
                return float(text)
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"no replica wrote {path} within {timeout:.0f} s")
        time.sleep(0.005)


class Server:
    """A `phalanx server` on loopback over its own PHALANX_HOME."""

    def __init__(self, home: Path) -> None:
        from phalanx.machine.ports import free_port

        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(home / "server.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            # unboxed, as `phalanx run --detach` is: its replicas write their stamps where this
            # bench reads them; what the box adds is bench/box.py's figure
            [*CLI, "server", "--port", str(self.port), "--log-level", "warning", "--trust-submitters"],
            env=env_for(home),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/api/v1/health", timeout=2):
                    return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log_text = (home / "server.log").read_text()[-2000:]
                    raise SystemExit(f"the server did not start: {log_text}") from None
                time.sleep(0.1)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}/api/v1{path}", timeout=60) as r:
            return json.load(r)

    def wait_idle(self, timeout: float = 300) -> None:
        """Every experiment has ended and left the machine's ledger (nothing runs or waits)."""
        deadline = time.monotonic() + timeout
        while True:
            doc = self.get("/queue")
            items = self.get("/experiments?limit=500")["items"]
            live = [e for e in items if e["status"] not in ("succeeded", "failed", "stopped")]
            if not doc["running"] and not doc["queued"] and not live:
                return
            if time.monotonic() > deadline:
                raise SystemExit("the server's experiments did not end in time")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        self.log.close()


def local_idle(home: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run([*CLI, "queue", "-o", "json"], env=env_for(home), capture_output=True, text=True)
        doc = json.loads(out.stdout or "{}")
        if not doc.get("running") and not doc.get("queued"):
            return
        if time.monotonic() > deadline:
            raise SystemExit("the local experiments did not end in time")
        time.sleep(0.1)


def latency(rounds: int, work: Path, server: Server, baseline: Path | None) -> dict[str, list[float]]:
    """``baseline``: another checkout's src/ whose `run --detach` takes its turn after this one's."""
    from phalanx.bundles import pack
    from phalanx.cli.remote import Client

    client = Client(server.url, None)
    srcs = {"local": REPO / "src"}
    if baseline is not None:
        srcs[BASELINE] = baseline
    out: dict[str, list[float]] = {"server": [], **{mode: [] for mode in srcs}}
    for i, mode in itertools.product(range(rounds), out):
        folder = work / f"{mode}-{i}"
        stamp = work / f"{mode}-{i}.stamp"
        spec = write_spec(folder, "one", stamp_cmd(stamp))
        if mode == "server":
            t0 = time.time()
            client.submit(spec, pack(folder), {}, 0)
            out[mode].append(wait_file(stamp) - t0)
            server.wait_idle()
        else:
            t0 = time.time()
            home = work / ("baseline-home" if mode == BASELINE else "local-home")
            subprocess.run(
                [*CLI, "run", "--detach", "-f", str(spec)],
                env=env_for(home, srcs[mode]),
                capture_output=True,
                check=True,
            )
            out[mode].append(wait_file(stamp) - t0)
            local_idle(home)
        print(f"\rlatency round {i + 1}/{rounds} {mode}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return out


def handover(n: int, work: Path, server: Server, cores: int) -> list[float]:
    from phalanx.bundles import pack
    from phalanx.cli.remote import Client

    client = Client(server.url, None)
    folder = work / "handover"
    release = work / "release"
    blocker = write_spec(
        folder,
        "blocker",
        f"python -c \"import os, time\nwhile not os.path.exists('{release}'): time.sleep(0.05)\"",
        cores,
    )
    trivial = write_spec(folder, "trivial", "echo done", cores)
    bundle = pack(folder)
    blocker_id = client.submit(blocker, bundle, {}, 0)["id"]
    ids = []
    for i in range(n):
        ids.append(client.submit(trivial, bundle, {}, 0)["id"])
        print(f"\rqueued {i + 1}/{n}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    release.touch()
    server.wait_idle(60.0 * n + 60)
    spans = []
    for exp_id in [blocker_id, *ids]:
        e = server.get(f"/experiments/{exp_id}")
        if e["status"] != "succeeded":
            raise SystemExit(f"experiment {exp_id} {e['status']}: {e.get('reason')}")
        spans.append((float(e["started_at"]), float(e["finished_at"])))
    spans.sort()
    return [b[0] - a[1] for a, b in itertools.pairwise(spans)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="latency rounds per mode (interleaved)")
    parser.add_argument("--n", type=int, default=20, help="experiments handed over by the queue")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="another checkout's src/ (e.g. main's): its `run --detach` alternates with this one's",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, one round: the suite's check that the bench runs (its figures mean nothing)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.n = 1, 2
    cores = len(os.sched_getaffinity(0))
    work = Path(tempfile.mkdtemp(prefix="phalanx-bench-submit-"))
    server = Server(work / "server-home")
    try:
        lat = latency(args.rounds, work, server, args.baseline_src.resolve() if args.baseline_src else None)
        gaps = handover(args.n, work, server, cores)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()[0]
    s_med, l_med = statistics.median(lat["server"]), statistics.median(lat["local"])
    g_med = statistics.median(gaps)
    results = {
        "cores": cores,
        "load_1min": load,
        "latency_s": lat,
        "latency_median_s": {"server": s_med, "local": l_med},
        "server_over_local": s_med / l_med,
        "handover_gaps_s": gaps,
        "handover_median_s": g_med,
        "handover_max_s": max(gaps),
        "clearml_poll_s": CLEARML_POLL_S,
    }
    print(f"{cores} cores, load average {load:.2f} (1 min)")
    print(f"submit -> first replica start, median of {args.rounds} (interleaved):")
    print(f"  through the server        {s_med:7.3f} s")
    print(f"  phalanx run --detach      {l_med:7.3f} s")
    print(f"  server / local            {s_med / l_med:7.2f} x")
    if BASELINE in lat:
        b_med = statistics.median(lat[BASELINE])
        results["latency_median_s"][BASELINE] = b_med  # type: ignore[index]
        print(f"  {BASELINE:<25} {b_med:7.3f} s (local / baseline {l_med / b_med:.2f} x)")
    print(f"queue hand-over (slot frees -> next starts), {len(gaps)} gaps through the server:")
    print(f"  median {g_med:.3f} s, max {max(gaps):.3f} s")
    print(f"  vs clearml-agent's {CLEARML_POLL_S:.0f} s minimum poll: {CLEARML_POLL_S / g_med:.1f}x shorter")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
