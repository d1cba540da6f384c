"""Logger.report_image/histogram/table/matplotlib_figure/plotly: each report is a file of the
experiment with its title, series, step and rank, one per rank; what cannot be stored is refused
with a UsageError saying why."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from tests.support.sandbox import Sandbox

from phalanx.tracking.objects import ArtifactError
from phalanx.tracking.reports import of_histogram, of_image, of_plotly, of_table, png_of_array


@pytest.mark.parametrize(
    ("array", "mode"),
    [
        (np.arange(12, dtype=np.uint8).reshape(3, 4), "L"),
        (np.arange(36, dtype=np.uint8).reshape(3, 4, 3), "RGB"),
        (np.arange(48, dtype=np.uint8).reshape(3, 4, 4), "RGBA"),
        (np.arange(12, dtype=np.uint8).reshape(3, 4, 1), "L"),
    ],
)
def test_an_array_becomes_a_png_with_its_pixels(array: np.ndarray, mode: str) -> None:
    decoded = Image.open(io.BytesIO(png_of_array(array)))
    assert decoded.mode == mode and decoded.size == (4, 3)
    assert np.array_equal(np.asarray(decoded), array.reshape(np.asarray(decoded).shape))


def test_floats_are_read_as_0_to_1_and_a_non_image_is_refused_saying_which_shapes() -> None:
    pixels = np.asarray(Image.open(io.BytesIO(png_of_array(np.array([[0.0, 0.5, 1.0, 7.0]])))))
    assert pixels.tolist() == [[0, 128, 255, 255]]
    with pytest.raises(ArtifactError, match="H x W x 3"):
        png_of_array(np.zeros((2, 2, 2)))
    with pytest.raises(ArtifactError, match="PNG, JPEG or GIF"):
        of_image(image=b"not an image")
    with pytest.raises(ArtifactError, match="one of local_path"):
        of_image()


def test_histograms_tables_and_plotly_figures_as_json() -> None:
    doc = json.loads(of_histogram(np.array([[1, 2], [3, 4]]), labels=["a", "b"]).payload)
    assert doc["values"] == [[1, 2], [3, 4]] and doc["labels"] == ["a", "b"]
    with pytest.raises(ArtifactError, match="finite"):
        of_histogram([1.0, float("nan")])
    frame = pd.DataFrame({"name": ["adam", "sgd"], "acc": [0.9, np.float32(0.5)]})
    assert json.loads(of_table(frame).payload) == {
        "columns": ["name", "acc"],
        "rows": [["adam", 0.9], ["sgd", 0.5]],
    }
    assert json.loads(of_table([["x", "y"], [1, None]]).payload) == {
        "columns": ["x", "y"],
        "rows": [[1, None]],
    }
    assert json.loads(of_plotly({"data": [{"y": np.arange(2)}]}).payload) == {"data": [{"y": [0, 1]}]}


SCRIPT = """
import os
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from phalanx import Task

task = Task.init("examples", "reports")
log = task.get_logger()
log.report_image("inputs", "digits", image=np.zeros((2, 3), dtype=np.uint8))  # step 0
log.report_image("inputs", "digits", image=np.full((2, 3), 9, dtype=np.uint8))  # step 1
log.report_image("inputs", "digits", iteration=1, image=np.full((2, 3), 7, dtype=np.uint8))  # replaces it
plt.plot([1, 2]); log.report_matplotlib_figure("curve", "loss", plt.gcf(), iteration=3)
log.report_table("results", "final", iteration=0, table_plot=pd.DataFrame({"acc": [0.9]}))
os.environ["RANK"] = "1"  # the same report from another rank is kept beside rank 0's
log.report_histogram("weights", "w", [1, 2], iteration=5)
del os.environ["RANK"]
log.report_histogram("weights", "w", [3, 4], iteration=5)
for bad in (lambda: log.report_image("", "s", image=np.zeros((2, 2))), lambda: log.report_table("t", "s")):
    try:
        bad()
    except Exception as exc:
        print("REFUSED", type(exc).__name__, exc)
assert task.flush(), task.flush_problems
"""


def test_reports_are_stored_per_step_and_rank_with_their_metadata(sandbox: Sandbox, tmp_path: Path) -> None:
    done = sandbox.run(SCRIPT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("REFUSED UsageError") == 2 and "title must be a non-empty string" in done.stdout
    store = sandbox.ingested()
    exp = sandbox.only_experiment(store)
    reports = {a.name: a for a in store.artifacts(exp) if a.kind == "report"}
    assert sorted(reports) == [
        "report/histogram/weights/w/5@rank0",
        "report/histogram/weights/w/5@rank1",
        "report/image/curve/loss/3@rank0",
        "report/image/inputs/digits/0@rank0",
        "report/image/inputs/digits/1@rank0",
        "report/table/results/final/0@rank0",
    ]
    one = reports["report/histogram/weights/w/5@rank1"]
    assert one.rank == 1 and one.content_type == "application/json"
    assert {k: one.metadata[k] for k in ("report", "title", "series", "step", "rank")} == {
        "report": "histogram", "title": "weights", "series": "w", "step": 5, "rank": 1,
    }  # fmt: skip
    files = store.artifact_store
    assert files is not None
    assert json.loads(files.read_bytes(exp, one.path))["values"] == [[1.0], [2.0]]
    second = Image.open(io.BytesIO(files.read_bytes(exp, reports["report/image/inputs/digits/1@rank0"].path)))
    assert np.asarray(second).tolist() == [[7, 7, 7], [7, 7, 7]]  # the step reported again replaced it
    figure = files.read_bytes(exp, reports["report/image/curve/loss/3@rank0"].path)
    assert (
        figure.startswith(b"\x89PNG")
        and reports["report/image/curve/loss/3@rank0"].metadata["source"] == "matplotlib"
    )


CLEARML_REST = """
import io
import numpy as np
from phalanx import Task
from phalanx.tracking.plots import SeriesInfo

task = Task.init("examples", "clearml calls")
log = task.get_logger()
log.report_single_value("accuracy", 0.93)
log.report_vector("weights", "w", values=np.array([1, 2, 3]), iteration=0, labels=["w"])
train = SeriesInfo("train", np.array([[0, 1.0], [1, 0.5]]))
log.report_line_plot("curves", [train], xaxis="epoch", yaxis="loss", iteration=0)
log.report_scatter2d("points", "p", scatter=np.array([[0, 1], [1, 2]]), iteration=0)
log.report_scatter3d("cloud", "c", scatter=[[0, 1, 2]], iteration=0)
cm = np.array([[5, 1], [0, 7]])
log.report_confusion_matrix("confusion", "val", cm, iteration=0, xlabels=["cat", "dog"])
log.report_matrix("confusion", "old", [[1]], iteration=0)
log.report_surface("surface", "s", np.ones((2, 2)), iteration=0)
log.report_media("audio", "clip", iteration=0, stream=io.BytesIO(b"RIFF0000WAVE"), file_extension="wav")
assert task.flush(), task.flush_problems
"""


def test_every_clearml_logger_call_a_seed_003_script_makes_is_stored(sandbox: Sandbox) -> None:
    done = sandbox.run(CLEARML_REST)
    assert done.returncode == 0, done.stderr
    store = sandbox.ingested()
    exp = sandbox.only_experiment(store)
    assert store.metrics(exp, "accuracy")["accuracy"]["summary"].values == [0.93]
    reports = {a.name: a for a in store.artifacts(exp) if a.kind == "report"}
    assert sorted(reports) == [
        "report/histogram/weights/w/0@rank0",
        "report/media/audio/clip/0@rank0",
        "report/plotly/cloud/c/0@rank0",
        "report/plotly/confusion/old/0@rank0",
        "report/plotly/confusion/val/0@rank0",
        "report/plotly/curves/lines/0@rank0",
        "report/plotly/points/p/0@rank0",
        "report/plotly/surface/s/0@rank0",
    ]
    files = store.artifact_store
    assert files is not None
    confusion = json.loads(files.read_bytes(exp, reports["report/plotly/confusion/val/0@rank0"].path))
    assert confusion["data"][0]["z"] == [[5.0, 1.0], [0.0, 7.0]] and confusion["data"][0]["x"] == [
        "cat",
        "dog",
    ]
    assert reports["report/plotly/confusion/val/0@rank0"].metadata["source"] == "confusion_matrix"
    assert files.read_bytes(exp, reports["report/media/audio/clip/0@rank0"].path) == b"RIFF0000WAVE"
