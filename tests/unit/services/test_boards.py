"""A TensorBoard board (phalanx.services.boards) writes what Phalanx recorded as event files that
TensorBoard's own reader reads back: one run per experiment, ``TITLE/SERIES`` tags at their steps,
and each render adds only the points reported since the one before."""

from __future__ import annotations

import io
import json
from pathlib import Path

from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from phalanx.config import Settings
from phalanx.domain import EventKind, ExperimentStatus, Trial, TrialState
from phalanx.services.boards import Board, Target, run_name
from phalanx.store import open_store
from phalanx.store.base import Store
from tests.unit.server import fill
from tests.unit.server.teams_fixtures import make_group


def _read(folder: Path) -> dict[str, list[tuple[int, float]]]:
    found = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    found.Reload()
    return {tag: [(e.step, round(e.value, 6)) for e in found.Scalars(tag)] for tag in found.Tags()["scalars"]}


def test_a_running_experiments_points_are_rendered_once_each_as_they_come(tmp_path: Path) -> None:
    store = open_store(Settings(home=tmp_path / "home"))
    e = fill.experiment(store, name="mnist/ddp", status=ExperimentStatus.RUNNING)
    fill.scalars(store, e.id, "loss", "train", [1.0, 0.5])
    fill.scalars(store, e.id, "accuracy", "accuracy", [0.25])
    board = Board(store, Target("experiment", e.id), tmp_path / "logs")
    assert board.render() == 3
    assert board.render() == 0  # nothing new: nothing written twice
    fill.scalars(store, e.id, "loss", "train", [1.0, 0.5, 0.25, 0.125])  # steps 0-3: 2 and 3 are new
    assert board.render() == 2
    board.close()
    run = tmp_path / "logs" / run_name(e)
    assert run.name == f"mnist_ddp-{e.id[:8]}"
    assert _read(run) == {
        "loss/train": [(0, 1.0), (1, 0.5), (2, 0.25), (3, 0.125)],
        "accuracy": [(0, 0.25)],  # a series named as its chart is the chart's tag
    }


def test_a_groups_board_shows_each_trial_and_gains_the_trials_that_start_later(tmp_path: Path) -> None:
    store = open_store(Settings(home=tmp_path / "home"))
    group = make_group(store, "A")
    board = Board(store, Target("group", group.id), tmp_path / "logs")
    trials = []
    for number, loss in enumerate((0.3, 0.1)):
        e = fill.experiment(store, name=f"trial-{number}", project="A")
        store.add_trial(Trial(group.id, number, e.id, {"x": loss}, TrialState.RUNNING))
        store.link_experiment(e.id, group.id)
        fill.scalars(store, e.id, "loss", "loss", [loss])
        trials.append(e)
        board.render()
    outsider = fill.experiment(store, name="not-a-trial", project="A")
    fill.scalars(store, outsider.id, "loss", "loss", [9.0])
    board.render()
    board.close()
    runs = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert runs == sorted(run_name(e) for e in trials)
    assert _read(tmp_path / "logs" / run_name(trials[1])) == {"loss": [(0, 0.1)]}


def test_a_deleted_trial_leaves_its_groups_board(tmp_path: Path) -> None:
    store = open_store(Settings(home=tmp_path / "home"))
    group = make_group(store, "A")
    trials = []
    for number in range(2):
        e = fill.experiment(store, name=f"trial-{number}", project="A")
        store.add_trial(Trial(group.id, number, e.id, {"x": number}, TrialState.DONE))
        store.link_experiment(e.id, group.id)
        fill.scalars(store, e.id, "loss", "loss", [0.5])
        trials.append(e)
    board = Board(store, Target("group", group.id), tmp_path / "logs")
    board.render()
    store.delete_experiment(trials[0].id)
    board.render()
    board.close()
    assert [p.name for p in (tmp_path / "logs").iterdir()] == [run_name(trials[1])]


def report(
    store: Store, experiment_id: str, report: str, title: str, step: int, data: bytes, rank: int = 0
) -> None:
    """A Logger report (``report_image``, ``report_histogram``) as the ingester records it: its file
    in the experiment's files, its artifact event naming it."""
    path = f"reports/s/{report}-{title}-{step}-{rank}"
    files = store.artifact_store
    assert files is not None
    files.put_bytes(experiment_id, path, data)
    meta = {"report": report, "title": title, "series": title, "step": step, "rank": rank}
    name = f"report/{report}/{title}/{title}/{step}@rank{rank}"
    doc = {
        "name": name,
        "kind": "report",
        "path": path,
        "size": len(data),
        "content_type": "",
        "metadata": meta,
    }
    store.write_events([fill.event(experiment_id, EventKind.ARTIFACT, doc)])


def test_the_loggers_images_and_histograms_are_on_the_board_once_each_at_their_step(tmp_path: Path) -> None:
    store = open_store(Settings(home=tmp_path / "home"))
    e = fill.experiment(store, name="cnn", status=ExperimentStatus.RUNNING)
    png = io.BytesIO()
    Image.new("RGB", (5, 3), (255, 0, 0)).save(png, format="PNG")
    jpeg = io.BytesIO()
    Image.new("RGB", (7, 4)).save(jpeg, format="JPEG")
    report(store, e.id, "image", "inputs", 0, png.getvalue())
    report(store, e.id, "image", "inputs", 0, jpeg.getvalue(), rank=1)  # rank 1's beside rank 0's
    report(
        store,
        e.id,
        "histogram",
        "weights",
        2,
        json.dumps({"values": [[1, 4], [3, 0], [-2, 1]], "labels": ["w", "b"]}).encode(),
    )
    report(store, e.id, "table", "results", 0, b'{"columns": [], "rows": []}')  # no TensorBoard tab for it
    board = Board(store, Target("experiment", e.id), tmp_path / "logs")
    assert board.render() == 3
    assert board.render() == 0  # each written once
    board.close()

    found = EventAccumulator(str(tmp_path / "logs" / run_name(e)), size_guidance={"tensors": 0})
    found.Reload()
    assert sorted(found.Tags()["tensors"]) == ["inputs", "inputs/rank1", "weights/b", "weights/w"]
    [image] = found.Tensors("inputs")
    width, height, encoded = tensor_util.make_ndarray(image.tensor_proto).tolist()
    assert (image.step, width, height, encoded) == (0, b"5", b"3", png.getvalue())
    assert tensor_util.make_ndarray(found.Tensors("inputs/rank1")[0].tensor_proto).tolist()[:2] == [
        b"7",
        b"4",
    ]
    [weights] = found.Tensors("weights/w")
    assert weights.step == 2
    assert tensor_util.make_ndarray(weights.tensor_proto).tolist() == [
        [0, 1, 1],
        [1, 2, 3],
        [2, 3, 0],
    ]  # -2: 0
    assert found.SummaryMetadata("weights/b").plugin_data.plugin_name == "histograms"
    assert found.SummaryMetadata("inputs").plugin_data.plugin_name == "images"
