"""Exercise 5.1's check on made-up "measured" curves: no timing, so every outcome is fixed."""

import pytest

from specdec_lab.course import checks

KS = [1, 2, 4, 8, 16, 32, 64]
MEASURED = {  # ms at each k: knees 64 (flat), 4, and 1 (out of the band at k = 2)
    "tiny": [1.0, 0.98, 1.02, 1.05, 1.06, 1.08, 1.09],
    "mid": [10.0, 10.2, 10.5, 12.5, 15.0, 25.0, 50.0],
    "big": [40.0, 70.0, 61.0, 72.0, 95.0, 130.0, 210.0],
}
RIGHT = {"worked example": 8, "tiny": 64, "mid": 4, "big": 1}


def check(knees):
    return checks.exercise_5_1(knees, KS, MEASURED, 0.1, 6)


def test_right_readings_pass_and_are_returned(capsys) -> None:
    assert check(dict(RIGHT)) == RIGHT
    out = capsys.readouterr().out
    assert "big: knee k = 1, so it verifies nothing for free" in out
    assert "mid: knee k = 4, so it verifies γ = 3 drafts for free" in out


def test_a_reading_at_the_band_edge_counts_either_way() -> None:
    edge = dict(MEASURED, mid=[10.0, 10.2, 10.5, 11.05, 15.0, 25.0, 50.0])  # 1.105 at k = 8
    for k in (4, 8):
        checks.exercise_5_1(dict(RIGHT, mid=k), KS, edge, 0.1, 6)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (dict(RIGHT, mid=2), "still inside the band"),
        (dict(RIGHT, mid=8), "first k outside the band"),
        (dict(RIGHT, big=2), "first k outside the band"),  # one grid step too far
        (dict(RIGHT, **{"worked example": 32}), "a later k that dips back in"),
        (dict(RIGHT, **{"worked example": 64}), "divided by the k = 1 median"),  # γ = 63 free
        (dict(RIGHT, tiny=2), "fastest k"),
        (dict(RIGHT, tiny=1), "still inside the band"),
        (dict(RIGHT, mid=3), "not a k of the grid"),
        (dict(RIGHT, mid=True), "not a k of the grid"),
        ({"worked example": 8, "tiny": 64}, "needs exactly the keys"),
        ([8, 64, 4, 1], "must be a dict"),
    ],
)
def test_misreadings_fail_with_a_sentence(wrong, message) -> None:
    with pytest.raises(AssertionError, match=f"Exercise 5.1: .*{message}"):
        check(wrong)


def test_a_reading_off_the_median_normalised_row_is_told_so() -> None:
    medians = dict(MEASURED, mid=[46.0, 10.4, 10.7, 12.8, 15.3, 25.5, 50.5])  # a slow k = 1 median
    with pytest.raises(AssertionError, match="mid: k = 64 is the knee of the row divided by"):
        checks.exercise_5_1(dict(RIGHT, mid=64), KS, MEASURED, 0.1, 6, medians)
    assert checks.exercise_5_1(dict(RIGHT), KS, MEASURED, 0.1, 6, medians) == RIGHT


def test_the_stub_is_not_an_answer() -> None:
    with pytest.raises(NotImplementedError, match="Exercise 5.1"):
        check(dict.fromkeys(RIGHT))
