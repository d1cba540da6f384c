import math

from hypothesis import given
from hypothesis import strategies as st

from phalanx.downsample import downsample, downsample_indices


def test_a_series_shorter_than_the_limit_comes_back_exact() -> None:
    xs, ys = list(range(100)), [float(i % 7) for i in range(100)]
    assert downsample(xs, ys, 100) == (xs, ys)
    assert downsample(xs, ys, 5000) == (xs, ys)


def test_a_single_spike_in_100k_points_survives() -> None:
    ys = [1.0] * 100_000
    ys[73_251] = 50.0
    ys[12_000] = -3.0
    idx = downsample_indices(ys, 1000)
    assert len(idx) <= 1000
    assert 73_251 in idx and 12_000 in idx


def test_first_and_last_points_are_kept_and_indices_ascend() -> None:
    ys = [math.sin(i / 50) for i in range(10_000)]
    idx = downsample_indices(ys, 300)
    assert idx[0] == 0 and idx[-1] == 9_999
    assert idx == sorted(set(idx))


def test_non_finite_values_are_never_picked_as_extremes() -> None:
    ys = [float("nan")] * 50 + [2.0, 1.0] + [float("inf")] * 50
    idx = downsample_indices(ys, 6)
    assert 50 in idx and 51 in idx


@given(
    st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=1, max_size=3000),
    st.integers(min_value=4, max_value=500),
)
def test_never_more_than_max_points_and_global_extremes_kept(ys: list[float], max_points: int) -> None:
    idx = downsample_indices(ys, max_points)
    assert len(idx) <= max(max_points, 4)
    assert idx == sorted(set(idx))
    kept = [ys[i] for i in idx]
    assert max(kept) == max(ys) and min(kept) == min(ys)
