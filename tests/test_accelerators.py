"""The accelerator vocabulary: ``A100:1`` parsing, aliases, canonical names, clear refusals."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ferry.accelerators import ALIASES, GPUS, TPUS, Accelerator, canonical_name, parse_accelerator


@pytest.mark.parametrize(
    ("text", "name", "count"),
    [
        ("A100:1", "A100", 1),
        ("a100", "A100", 1),
        ("A100", "A100", 1),
        ("H100:8", "H100", 8),
        ("h100:8", "H100", 8),
        (" H100:8 ", "H100", 8),
        ("A100-80GB:2", "A100-80GB", 2),
        ("a100-80gb:2", "A100-80GB", 2),
        ("nvidia-tesla-a100", "A100", 1),
        ("nvidia-tesla-a100:4", "A100", 4),
        ("NVIDIA_TESLA_T4:2", "T4", 2),
        ("nvidia-h100-80gb:8", "H100", 8),
        ("nvidia-l4", "L4", 1),
        ("nvidia-a10g", "A10G", 1),
        ("T4g", "T4g", 1),
        ("tpu-v5e-8", "tpu-v5e", 8),
        ("TPU-V5E-8", "tpu-v5e", 8),
        ("v5e-8", "tpu-v5e", 8),
        ("v5litepod-8", "tpu-v5e", 8),
        ("tpu-v5litepod-16", "tpu-v5e", 16),
        ("tpu-v4-32", "tpu-v4", 32),
        ("v5p-128", "tpu-v5p", 128),
        ("tpu-v5e:8", "tpu-v5e", 8),
    ],
)
def test_parse_accelerator(text: str, name: str, count: int) -> None:
    acc = parse_accelerator(text)
    assert acc == Accelerator(name, count)


def test_gpus_and_tpus_know_which_they_are() -> None:
    assert parse_accelerator("tpu-v5e-8").is_tpu
    assert not parse_accelerator("A100:1").is_tpu
    assert str(parse_accelerator("tpu-v5e-8")) == "tpu-v5e-8"
    assert str(parse_accelerator("a100")) == "A100:1"


def test_unknown_accelerator_suggests_the_closest_names() -> None:
    with pytest.raises(ValueError) as info:
        parse_accelerator("A101")
    message = str(info.value)
    assert "'A101'" in message
    assert "did you mean" in message
    assert "A100" in message


def test_unknown_accelerator_with_nothing_close_lists_the_known_ones() -> None:
    with pytest.raises(ValueError) as info:
        parse_accelerator("quantum-widget:2")
    message = str(info.value)
    assert "quantum-widget" in message
    assert "A100" in message and "tpu-v5e" in message


@pytest.mark.parametrize(
    "bad", ["A100:0", "A100:x", "A100:", "A100:-1", "A100:1.5", "A100:1:2", "A100:+2", "A100:00"]
)
def test_count_must_be_a_whole_number_of_at_least_one(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_accelerator(bad)
    assert "at least 1" in str(info.value)


def test_count_in_other_scripts_digits_gets_the_same_clear_message() -> None:
    # "²" is a digit to str.isdigit() but not to int(): the message must still say
    # what is wrong, not "invalid literal for int() with base 10".
    with pytest.raises(ValueError) as info:
        parse_accelerator("A100:²")
    assert "at least 1" in str(info.value)


@pytest.mark.parametrize("bad", ["tpu-v5e-0", "v5litepod-0", "tpu-v4-00"])
def test_a_tpu_slice_has_at_least_one_chip(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_accelerator(bad)


@pytest.mark.parametrize("bad", ["", "   ", None, 1, 1.0, True, ["A100:1"], {"A100": 1}])
def test_empty_or_not_text(bad: object) -> None:
    with pytest.raises(ValueError) as info:
        parse_accelerator(bad)
    assert "A100:1" in str(info.value)  # says what would be valid


@pytest.mark.parametrize("bad", ["tpu-v5e", "v5litepod", "TPU-V4"])
def test_a_tpu_needs_its_slice_size(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_accelerator(bad)
    message = str(info.value)
    assert "how many TPU chips" in message
    assert "-8" in message  # shows the form to use


def test_unknown_tpu_generation() -> None:
    with pytest.raises(ValueError) as info:
        parse_accelerator("tpu-v99-8")
    assert "unknown accelerator" in str(info.value)


@pytest.mark.parametrize("name", [*GPUS, *TPUS])
def test_canonical_names_are_their_own_canonical_name(name: str) -> None:
    assert canonical_name(name) == name
    assert canonical_name(name.lower()) == name
    assert canonical_name(name.upper()) == name


@pytest.mark.parametrize(("alias", "name"), sorted(ALIASES.items()))
def test_every_alias_maps_to_a_known_name(alias: str, name: str) -> None:
    assert name in GPUS or name in TPUS
    assert canonical_name(alias) == name


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from([*GPUS, *TPUS, *ALIASES]), count=st.integers(1, 4096))
def test_canonical_form_round_trips(name: str, count: int) -> None:
    """str(Accelerator) parses back to the same value, and is already canonical."""
    text = f"{name}-{count}" if name.lower().startswith("tpu-") else f"{name}:{count}"
    acc = parse_accelerator(text)
    assert acc.count == count
    assert parse_accelerator(str(acc)) == acc
    assert str(parse_accelerator(str(acc))) == str(acc)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30))
@example("A100:²")
@example("tpu-v5e-0")
def test_any_text_parses_to_a_canonical_request_or_raises_value_error(text: str) -> None:
    try:
        acc = parse_accelerator(text)
    except ValueError:
        return
    assert acc.count >= 1
    assert acc.name in GPUS or acc.name in TPUS
    assert parse_accelerator(str(acc)) == acc
