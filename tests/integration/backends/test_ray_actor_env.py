"""A Ray node builds an experiment's environment once for all the replicas placed on it
(phalanx.backends.ray_actor), without Ray: the replica actor is a plain class the engine ships to the
nodes, so two of them on one node folder are what two actors on one node are. The build is real (a
venv of this Python and the file's build step, about 25 s on a loaded machine: one build); the live
Ray tests (tests/integration/ray) run only what needs the cluster."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from phalanx.backends.ray_actor import ReplicaActor

# each build appends a line beside the venv: the count of lines is the count of builds; then it is
# silent for 5 s (a slow download), which the console's heartbeat (1 s here, 30 s by default) fills
STEP = 'echo built >> "$VIRTUAL_ENV.builds"; echo fetched part 1; sleep 5'


def _actor(node: Path, replica: str) -> ReplicaActor:
    order: dict[str, Any] = {
        "experiment_id": "e1",
        "group": 0,
        "replica": replica,
        "node_dir": str(node),
        "env_build": {"hash": "h1", "packages": [], "steps": [STEP]},
        "heartbeat": 1.0,
    }
    return ReplicaActor(order)


def test_two_replicas_on_one_node_build_its_environment_once_in_the_open_and_both_run_in_it(
    tmp_path: Path,
) -> None:
    node = tmp_path / "node"
    code = tmp_path / "code"
    code.mkdir()
    actors = [_actor(node, "master"), _actor(node, "worker-0")]
    paths: dict[str, tuple[list[str], list[str]]] = {}
    errors: list[BaseException] = []

    def prepare(actor: ReplicaActor) -> None:
        try:
            paths[str(actor.order["replica"])] = actor._environment(code)
        except BaseException as exc:  # reported below, with the thread's replica
            errors.append(exc)

    threads = [threading.Thread(target=prepare, args=(a,)) for a in actors]  # at once: the lock decides
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    env = node / "envs" / "h1"
    assert (env / ".ready").exists() and (env / "bin" / "python").exists()
    assert (node / "envs" / "h1.builds").read_text() == "built\n"  # one build for both
    assert paths["master"] == paths["worker-0"] == ([str(code / ".phalanx-sdk")], [str(env / "bin")])
    # in the open: the builder's console says what it builds and, while the step is silent, that it
    # still builds with the step's last line; the other replica's says what it waits for
    consoles = sorted((a.log.read_text() for a in actors), key=lambda text: "waiting for" in text)
    builder, waiter = consoles
    assert "phalanx: building the environment h1 on this node (once)" in builder, builder
    beats = [line for line in builder.splitlines() if line.startswith("phalanx: still building (")]
    silent_step = [b for b in beats if "build step" in b and b.endswith("; last line: fetched part 1")]
    assert len(silent_step) >= 2, builder  # 5 s without a line: one at least every second or so
    assert "phalanx: waiting for this node's build of the environment h1" in waiter, waiter
