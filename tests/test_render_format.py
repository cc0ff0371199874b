"""Number and label formatting shared by every renderer."""

import math

import pytest

from harness.render.format import check_numbers, flat_environment, fmt_margin, fmt_number, fmt_seconds, is_relative_link
from harness.results import Check, Status


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "—"), (0.0, "0"), (1.234e-4, "1.23e-04"), (2e-3, "2.00e-03"), (0.0123, "0.0123"),
        (654.32, "654"), (85.04, "85"), (1.5, "1.5"), (168.0, "168"), (7, "7"), (123456.7, "1.23e+05"),
        (math.nan, "nan"), (-math.inf, "-inf"),
    ],
)
def test_fmt_number_three_significant_digits(value: float | None, text: str) -> None:
    assert fmt_number(value) == text


def test_fmt_margin_is_signed() -> None:
    assert fmt_margin(1.5e-3) == "+1.50e-03"
    assert fmt_margin(-2.9e-2) == "-0.029"
    assert fmt_margin(None) == "—"


def test_check_numbers_follow_a_small_threshold_into_scientific() -> None:
    check = Check(workload="w", metric="max_abs_err", threshold=2e-3, measured=3.1e-2, status=Status.FAIL,
                  margin=-2.9e-2)
    assert check_numbers(check) == ("≤ 2.00e-03", "3.10e-02", "-2.90e-02")
    tflops = Check(workload="w", metric="tflops", threshold=450.0, measured=612.3, status=Status.PASS,
                   comparison=">=", margin=162.3)
    assert check_numbers(tflops) == ("≥ 450", "612", "+162")


def test_fmt_seconds() -> None:
    assert fmt_seconds(0.123) == "0.12 s"
    assert fmt_seconds(12.34) == "12.3 s"
    assert fmt_seconds(125) == "2m 05s"


def test_flat_environment_flattens_nested_keys_in_order() -> None:
    env = {"gpu": "H100", "git": {"commit": "abc", "dirty": False}, "clocks": [1, 2], "nvcc": None}
    assert flat_environment(env) == [
        ("gpu", "H100"), ("git.commit", "abc"), ("git.dirty", "no"), ("clocks", "1, 2"), ("nvcc", "—"),
    ]


def test_only_plain_relative_paths_are_links() -> None:
    assert is_relative_link("logs/build.txt")
    assert not is_relative_link("javascript:alert(1)")
    assert not is_relative_link("/etc/passwd")
    assert not is_relative_link("https://example.com/x")
