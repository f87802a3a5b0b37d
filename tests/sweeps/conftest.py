"""What the sweep tests share: ``ferry sweep status``'s table, read as a person reads it."""

from __future__ import annotations

import re


def status_rows(text: str) -> list[dict[str, str]]:
    """``ferry sweep status``'s trials, each a header -> its value ('' when blank),
    asserting that every value stands under its header: below it and no other, starting
    where it starts or (a number) ending where it ends."""
    header, *rows = text.splitlines()[1:]
    names = [(m.group(), m.start(), m.end()) for m in re.finditer(r"\S+", header)]
    found = []
    for row in rows:
        cells = dict.fromkeys((name for name, _, _ in names), "")
        for value in re.finditer(r"\S+", row):
            under = [n for n in names if n[1] < value.end() and value.start() < n[2]]
            assert len(under) == 1, f"{value.group()!r} stands under {under}:\n{text}"
            name, start, end = under[0]
            assert value.start() == start or value.end() == end, (
                f"{value.group()!r} is not aligned with {name!r}:\n{text}"
            )
            cells[name] = value.group()
        found.append(cells)
    return found
