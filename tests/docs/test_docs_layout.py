"""The docs a newcomer reads stay short and true: the README and ARCHITECTURE.md within their
sizes, each decision record in its form, no tracker numbers anywhere, and every repository
path a document names still there (a renamed module leaves no stale reference behind)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([*REPO.glob("*.md"), *(REPO / "docs").rglob("*.md"), *(REPO / "bench" / "results").glob("*.md")])
README_MAX = 10 * 1024
ARCHITECTURE_MAX = 15 * 1024
WHERE_IS_ROW_MAX = 200
# A path in backquotes, inside the repository, with no placeholder: `fleetctl/cli/main.py`.
REPO_PATH = re.compile(r"`((?:fleetctl|workflows|checks|tests|bench|deploy|docs|runbooks|migrations)/[\w./-]*\w)`")
TRACKER = re.compile(r"\b[Ii]ssues? #?[0-9]+")


def test_the_readme_is_short_and_names_the_two_commands() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.encode()) <= README_MAX
    assert "make demo" in text and "make test" in text


def test_architecture_is_short_with_one_line_per_where_is_row() -> None:
    text = (REPO / "ARCHITECTURE.md").read_text()
    assert len(text.encode()) <= ARCHITECTURE_MAX
    rows = text.split("## Where is X", 1)[1].splitlines()
    assert [row for row in rows if row.startswith("|") and len(row) > WHERE_IS_ROW_MAX] == []


def test_each_decision_record_has_its_parts_and_is_listed() -> None:
    decisions = REPO / "docs" / "decisions"
    records = sorted(decisions.glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert [int(r.name[:4]) for r in records] == list(range(1, len(records) + 1))
    index = (decisions / "index.md").read_text()
    for record in records:
        text = record.read_text()
        assert text.startswith(f"# {int(record.name[:4])}. "), record.name
        assert all(f"**{part}.**" in text for part in ("Context", "Decision", "Consequences")), record.name
        assert f"({record.name})" in index, record.name


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_no_tracker_numbers_and_no_stale_paths(doc: Path) -> None:
    text = doc.read_text()
    assert TRACKER.findall(text) == []
    assert [p for p in REPO_PATH.findall(text) if not (REPO / p).exists()] == []


def test_no_tracker_numbers_in_the_code() -> None:
    found = [
        f"{path.relative_to(REPO)}: {match.group()}"
        for top in ("fleetctl", "workflows", "checks", "tests", "bench")
        for path in (REPO / top).rglob("*.py")
        for match in TRACKER.finditer(path.read_text())
    ]
    assert found == []
