"""The docs users read stand alone and say what the code does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
USER_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_docs_and_the_code_cite_no_file_users_do_not_have() -> None:
    files = [*USER_FILES, *sorted((ROOT / "ferry").rglob("*.py"))]
    citing = [
        str(path.relative_to(ROOT))
        for path in files
        if re.search(r"DESIGN\.md|STYLE\.md|\.\./shared", path.read_text())
    ]
    assert citing == []
    assert (ROOT / "docs" / "architecture.md").exists()


def test_the_readme_names_modules_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    developing = readme.split("## Developing")[1]
    for name in re.findall(r"`((?:ferry/)?[a-z_/]+(?:\.py|/))`", developing):
        path = ROOT / (name if name.startswith("ferry/") else f"ferry/{name}")
        assert path.exists(), f"README.md names {name}, which does not exist"
    assert "on their way" not in readme.split("## Journey 1")[0]


@pytest.mark.parametrize("name", ["local.stop_grace", "outputs.sync_interval"])
def test_documented_duration_defaults_match_the_settings(name: str) -> None:
    from ferry.config import SETTINGS

    default = float(SETTINGS[name].default)
    mentions = 0
    for path in USER_FILES:
        text = path.read_text()
        # "`local.stop_grace` (30 s by default)", "`local.stop_grace` | `30s` |"
        for match in re.finditer(
            re.escape(f"`{name}`") + r"[^`\n]{0,12}?`?\(?(\d+(?:\.\d+)?) ?s\b", text
        ):
            mentions += 1
            stated = float(match.group(1))
            assert stated == default, f"{path.name} says {name} is {stated:g} s, not {default:g}"
    assert mentions, f"no doc states the default of {name}"
