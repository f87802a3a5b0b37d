"""Reading stored log lines: the stream and rank of each, whole lines only, and filters."""

from __future__ import annotations

from pathlib import Path

from ferry.logs import parse_line, split_block, tail_block, text_of

STAMP = b"2026-12-04T14:17:32.336Z"
BLOCK = b"".join(
    STAMP + b" " + tag + b" " + text + b"\n"
    for tag, text in (
        (b"O", b"rank 0 says hi"),
        (b"O1", b"12 is where rank 1 starts"),  # (text that begins with digits)
        (b"E1", b"rank 1 warns"),
        (b"O12", b"rank 12"),
        (b"O", b""),  # an empty line
    )
)


def test_each_line_keeps_its_stream_rank_and_text() -> None:
    lines = [parse_line(raw) for raw in BLOCK.splitlines()]
    assert [(x.stream, x.rank, x.text) for x in lines] == [
        ("stdout", 0, "rank 0 says hi"),
        ("stdout", 1, "12 is where rank 1 starts"),
        ("stderr", 1, "rank 1 warns"),
        ("stdout", 12, "rank 12"),
        ("stdout", 0, ""),
    ]
    assert parse_line(b"not a stored line").text == "not a stored line"


def test_text_of_filters_by_stream_and_rank_and_can_lead_with_the_rank() -> None:
    assert text_of(BLOCK, False) == (
        b"rank 0 says hi\n12 is where rank 1 starts\nrank 1 warns\nrank 12\n\n"
    )
    assert text_of(BLOCK, False, rank=1) == b"12 is where rank 1 starts\nrank 1 warns\n"
    assert text_of(BLOCK, False, "stderr", rank=1) == b"rank 1 warns\n"
    assert text_of(BLOCK, False, rank=0) == b"rank 0 says hi\n\n"
    assert text_of(BLOCK, True, rank=12) == STAMP + b" rank 12\n"
    shown = text_of(BLOCK, False, show_rank=True).splitlines()
    assert shown == [
        b"[0] rank 0 says hi",
        b"[1] 12 is where rank 1 starts",
        b"[1] rank 1 warns",
        b"[12] rank 12",
        b"[0] ",
    ]
    out, err = split_block(BLOCK, False, None, True)
    assert err == b"[1] rank 1 warns\n" and b"[12] rank 12\n" in out


def test_tail_counts_only_the_lines_of_the_rank_asked_for(tmp_path: Path) -> None:
    log = tmp_path / "attempt-1.log"
    log.write_bytes(BLOCK * 3)
    block, end = tail_block(str(log), 2, None, 1)
    assert end == len(BLOCK) * 3
    assert text_of(block, False) == b"12 is where rank 1 starts\nrank 1 warns\n"
    block, _ = tail_block(str(log), 1, "stdout", 12)
    assert text_of(block, False) == b"rank 12\n"
