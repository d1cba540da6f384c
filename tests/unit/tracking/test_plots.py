"""The rest of ClearML's Logger calls build plotly figures from plain numbers (and numpy's lists);
what cannot be drawn is refused saying why."""

from __future__ import annotations

import json

import pytest

from phalanx.tracking.objects import ArtifactError
from phalanx.tracking.plots import SeriesInfo, line_figure, matrix_figure, of_media, scatter_figure


def test_lines_scatters_and_matrices_are_plotly_figures() -> None:
    lines = line_figure(
        [SeriesInfo("a", [[0, 1], [1, 3]]), {"name": "b", "data": [(0, 2)]}], "x", "y", "lines", True, None
    )
    assert [(t["name"], t["x"], t["y"]) for t in lines["data"]] == [
        ("a", [0.0, 1.0], [1.0, 3.0]),
        ("b", [0.0], [2.0]),
    ]
    assert lines["layout"]["xaxis"] == {"title": {"text": "x"}, "autorange": "reversed"}
    three = scatter_figure([[1, 2, 3]], 3, "pts", ("x", "y", "z"), ["p"], "markers", {"showlegend": False})
    assert three["data"][0]["type"] == "scatter3d" and three["data"][0]["text"] == ["p"]
    assert (
        three["layout"]["scene"]["zaxis"] == {"title": {"text": "z"}}
        and three["layout"]["showlegend"] is False
    )
    heat = matrix_figure("heatmap", [[5, 1], [0, 7]], ("predicted", "true"), ["cat", "dog"], None, True, None)
    assert heat["data"][0] == {"type": "heatmap", "z": [[5.0, 1.0], [0.0, 7.0]], "x": ["cat", "dog"]}
    assert heat["layout"]["yaxis"]["autorange"] == "reversed"
    assert matrix_figure("surface", [[1, 2]], (None, None, "h"), None, None, False, None)["layout"] == {
        "scene": {"zaxis": {"title": {"text": "h"}}}
    }


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (
            lambda: scatter_figure([[1, 2, 3]], 2, "s", ("x", "y"), None, "lines", None),
            "each row needs 2 numbers",
        ),
        (
            lambda: matrix_figure("heatmap", [[1, float("nan")]], ("x", "y"), None, None, False, None),
            "finite",
        ),
        (lambda: matrix_figure("heatmap", [[1, 2], [3]], ("x", "y"), None, None, False, None), "same length"),
        (lambda: line_figure([], None, None, "lines", False, None), "at least one series"),
        (lambda: of_media(None, None, None, None), "exactly one of"),
    ],
)
def test_what_cannot_be_drawn_is_refused(build: object, says: str) -> None:
    with pytest.raises(ArtifactError, match=says):
        build()  # type: ignore[operator]


def test_media_keeps_its_file_type_and_an_image_is_an_image() -> None:
    audio = of_media(None, b"RIFF....WAVE", "wav", None)
    assert (audio.kind, audio.extension, audio.content_type) == ("media", "wav", "audio/x-wav")
    png = of_media(None, b"\x89PNG\r\n\x1a\n rest", "png", None)
    assert png.kind == "image"
    link = of_media(None, None, None, "https://example.org/a.mp4")
    assert json.loads(link.payload) == {"url": "https://example.org/a.mp4"}
