"""Sizes and durations as people type them: what parses, to what, and what is refused."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ferry.units import format_duration, format_size, parse_duration, parse_size

GB = 1000**3
GIB = 1024**3


# ---------------------------------------------------------------------------------------
# parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("32GB", 32 * GB),
        ("32GiB", 32 * GIB),
        ("32 GB", 32 * GB),
        ("32 GiB", 32 * GIB),
        ("32g", 32 * GB),
        ("32G", 32 * GB),
        ("32gb", 32 * GB),
        ("32gib", 32 * GIB),
        ("32Gi", 32 * GIB),
        ("512MB", 512 * 1000**2),
        ("512MiB", 512 * 1024**2),
        ("1.5GB", 1_500_000_000),
        (".5G", 500_000_000),
        ("2TB", 2 * 1000**4),
        ("1TiB", 1024**4),
        ("4k", 4000),
        ("4KiB", 4096),
        ("100B", 100),
        ("100", 100),
        ("  8GB  ", 8 * GB),
        ("0", 0),
    ],
)
def test_parse_size_accepts_what_people_type(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(("number", "expected"), [(0, 0), (1024, 1024), (32 * GB, 32 * GB)])
def test_parse_size_takes_a_plain_number_as_bytes(number: int, expected: int) -> None:
    assert parse_size(number) == expected
    assert isinstance(parse_size(number), int)


def test_parse_size_truncates_a_fractional_number_of_bytes() -> None:
    assert parse_size(1.9) == 1
    assert isinstance(parse_size("1.5KB"), int)


@pytest.mark.parametrize(
    "bad",
    [
        "lots",
        "-1GB",
        "",
        "   ",
        "1.2.3G",
        "GB",
        "32 G B",
        "32XB",
        "32gigabytes",
        "1e3",
        "5.",
        "nan",
        "inf",
        "0x10",
        -1,
        -0.5,
        float("nan"),
        float("inf"),
        float("-inf"),
        True,
        False,
        None,
        [],
        ["32GB"],
        {"size": "32GB"},
        b"32GB",
    ],
)
def test_parse_size_refuses_with_a_sentence_naming_valid_sizes(bad: object) -> None:
    with pytest.raises(ValueError) as info:
        parse_size(bad)
    message = str(info.value)
    assert "32GB" in message  # says what would be valid
    assert repr(bad)[:20] in message  # and what was given


def test_parse_size_refuses_a_size_too_large_to_compute_with_a_value_error() -> None:
    # A string of 400 digits overflows float; the caller must still see ValueError
    # (the spec turns ValueError into a field-named SpecError; OverflowError escapes it).
    with pytest.raises(ValueError):
        parse_size("9" * 400 + "TB")


@given(st.integers(min_value=0, max_value=10**15), st.sampled_from(["", "B", "KB", "GB", "TiB"]))
def test_parse_size_of_whole_numbers_scales_by_the_unit(number: int, unit: str) -> None:
    factor = {"": 1, "B": 1, "KB": 1000, "GB": GB, "TiB": 1024**4}[unit]
    if number * factor > 2**63 - 1:  # past what the store keeps as an integer: refused
        with pytest.raises(ValueError):
            parse_size(f"{number}{unit}")
        return
    # the float path may round huge products, but never by more than one part in 1e15
    assert math.isclose(parse_size(f"{number}{unit}"), number * factor, rel_tol=1e-15)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.integers(), st.floats(), st.none(), st.booleans()))
@example("9" * 400 + "GB")
def test_parse_size_returns_bytes_or_raises_value_error(value: object) -> None:
    try:
        size = parse_size(value)
    except ValueError:
        return
    assert isinstance(size, int)
    assert size >= 0


# ---------------------------------------------------------------------------------------
# parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", 90.0),
        ("10m", 600.0),
        ("6h", 21600.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("1d", 86400.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("2min", 120.0),
        ("3sec", 3.0),
        ("2hr", 7200.0),
        ("6H", 21600.0),
        ("  10m ", 600.0),
        ("30", 30.0),
        ("2.5", 2.5),
    ],
)
def test_parse_duration_accepts_what_people_type(text: str, expected: float) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(("number", "expected"), [(5, 5.0), (2.5, 2.5), (86400, 86400.0)])
def test_parse_duration_takes_a_plain_number_as_seconds(number: float, expected: float) -> None:
    result = parse_duration(number)
    assert result == expected
    assert isinstance(result, float)


@pytest.mark.parametrize(
    "bad",
    [
        "6x",
        "0",
        "0s",
        "-5",
        "-5m",
        "",
        "   ",
        "h",
        "abc",
        "1h30",
        "m10",
        "10 minutes",
        "nan",
        "inf",
        "1e400",
        0,
        -5,
        0.0,
        float("nan"),
        float("inf"),
        True,
        False,
        None,
        [],
        ["6h"],
        {"h": 6},
    ],
)
def test_parse_duration_refuses_with_a_sentence_naming_valid_durations(bad: object) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration(bad)
    message = str(info.value)
    assert "6h" in message  # says what would be valid
    assert repr(bad)[:20] in message


def test_parse_duration_refuses_an_integer_too_large_for_a_float_with_a_value_error() -> None:
    # YAML reads `max_runtime: 999...9` (400 digits) as an int; float() of it overflows.
    with pytest.raises(ValueError):
        parse_duration(10**400)


def test_parse_duration_message_for_a_bad_number_is_a_sentence() -> None:
    with pytest.raises(ValueError) as info:
        parse_duration(float("nan"))
    assert "a positive a " not in str(info.value)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.integers(), st.floats(), st.none(), st.booleans()))
@example(10**400)
def test_parse_duration_returns_positive_seconds_or_raises_value_error(value: object) -> None:
    try:
        seconds = parse_duration(value)
    except ValueError:
        return
    assert isinstance(seconds, float)
    assert 0 < seconds < math.inf


@given(
    st.integers(min_value=0, max_value=30),
    st.integers(min_value=0, max_value=23),
    st.integers(min_value=0, max_value=59),
    st.integers(min_value=0, max_value=59),
)
def test_parse_duration_adds_the_parts(days: int, hours: int, minutes: int, secs: int) -> None:
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    text = "".join(f"{n}{u}" for n, u in parts if n)
    total = days * 86400 + hours * 3600 + minutes * 60 + secs
    if total == 0:
        with pytest.raises(ValueError):
            parse_duration(text or "0s")
    else:
        assert parse_duration(text) == total


# ---------------------------------------------------------------------------------------
# format_size / format_duration


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 KB"),
        (1536, "1.5 KB"),
        (1_536_000_000, "1.5 GB"),
        (32 * GB, "32.0 GB"),
        (2 * 1000**4, "2.0 TB"),
        (5 * 1000**5, "5000.0 TB"),
    ],
)
def test_format_size(number: float, expected: str) -> None:
    assert format_size(number) == expected


def test_format_size_rounds_up_into_the_next_unit() -> None:
    # 999,950 bytes is 999.95 KB; shown with one decimal that is 1.0 MB, not "1000.0 KB".
    assert format_size(999_950) == "1.0 MB"


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0, "0.0s"),
        (2.5, "2.5s"),
        (12, "12s"),
        (59, "59s"),
        (60, "1m"),
        (90, "1m30s"),
        (5400, "1h30m"),
        (3600, "1h"),
        (86400, "1d"),
        (90061, "1d1h"),  # two largest parts only
    ],
)
def test_format_duration(seconds: float, expected: str) -> None:
    assert format_duration(seconds) == expected


def test_format_duration_rounds_up_into_minutes() -> None:
    assert format_duration(59.96) == "1m"


@given(st.integers(min_value=1, max_value=10**7))
def test_format_duration_parses_back_within_its_precision(seconds: int) -> None:
    shown = format_duration(seconds)
    back = parse_duration(shown)
    # only the two largest parts are shown: the rest is under one unit of the second part
    assert back <= seconds
    assert seconds - back < 3600


def test_format_usd_never_shows_a_cost_as_nothing() -> None:
    from ferry.units import format_usd

    assert [format_usd(x) for x in (0, 0.0002, 0.004, 0.005, 1234.5)] == [
        "0.00",
        "<0.01",
        "<0.01",
        "0.01",
        "1,234.50",
    ]
