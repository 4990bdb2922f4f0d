"""Every fixture says where it came from: real output cited, edits and inventions labelled.

A fixture cites its source in a `# source:` first line, or, where a reader needs the file's
bytes untouched (a prefix check, a fake tool that prints it, a line-by-line layout
comparison), in a row of its directory's SOURCES.md table (`| file | source |`). A directory
that documents its fixtures in README.md may name each one at the start of a line
(`name: ...`), as tests/fixtures/intake does.
"""

from __future__ import annotations

import re
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
HEADER = re.compile(r"#\s*source:\s*\S", re.IGNORECASE)
INDEXES = ("SOURCES.md", "README.md")


def fixture_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name not in INDEXES and "__pycache__" not in p.parts)


def sources_table(path: Path) -> dict[str, str]:
    """file name -> source cell of each `| file | source |` row (the header and rule rows left out)."""
    rows = {}
    for line in path.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) >= 2 and cells[0] not in ("file", "") and not set(cells[0]) <= set("-: "):
            rows[cells[0].strip("`")] = " | ".join(cells[1:])
    return rows


def readme_names(path: Path) -> set[str]:
    return {match.group(1) for match in re.finditer(r"^`?([\w.-]+\.\w+)`?:", path.read_text(), re.MULTILINE)}


def cited_elsewhere(directory: Path) -> dict[str, str]:
    cited: dict[str, str] = {}
    if (directory / "SOURCES.md").exists():
        cited.update(sources_table(directory / "SOURCES.md"))
    if (directory / "README.md").exists():
        cited.update(dict.fromkeys(readme_names(directory / "README.md"), "README.md"))
    return cited


def uncited(root: Path) -> list[str]:
    missing = []
    for path in fixture_files(root):
        with path.open(errors="replace") as handle:
            first = handle.readline()
        if not HEADER.match(first) and not cited_elsewhere(path.parent).get(path.name, "").strip():
            missing.append(str(path.relative_to(root)))
    return missing


def stale_entries(root: Path) -> list[str]:
    return [
        f"{index.relative_to(root)}: {name}"
        for index in sorted(root.rglob("SOURCES.md"))
        for name in sources_table(index)
        if not (index.parent / name).is_file()
    ]


def test_every_fixture_cites_its_source() -> None:
    assert uncited(FIXTURES) == []


def test_every_sources_md_row_names_a_fixture_that_exists() -> None:
    assert stale_entries(FIXTURES) == []


def test_an_uncited_fixture_and_a_stale_row_are_caught(tmp_path: Path) -> None:
    (tmp_path / "tool").mkdir()
    (tmp_path / "tool" / "headed.txt").write_text("# source: https://example.org/issue/1, verbatim\nout\n")
    (tmp_path / "tool" / "listed.txt").write_text("verbatim bytes\n")
    (tmp_path / "tool" / "bare.txt").write_text("# Rank 0 on node1\nno source anywhere\n")
    (tmp_path / "tool" / "empty_cell.txt").write_text("out\n")
    (tmp_path / "tool" / "SOURCES.md").write_text(
        "| file | source |\n|---|---|\n| listed.txt | constructed: to exercise a case |\n| empty_cell.txt |  |\n| gone.txt | x |\n"
    )
    assert uncited(tmp_path) == ["tool/bare.txt", "tool/empty_cell.txt"]
    assert stale_entries(tmp_path) == ["tool/SOURCES.md: gone.txt"]
