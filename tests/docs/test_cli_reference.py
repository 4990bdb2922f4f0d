"""The CLI reference (docs/cli.md, generated at every docs build by docs/cli_reference.py) names
every command of the Typer app with that command's own help: nothing in it is kept by hand."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

from fleetctl.cli.main import NOUNS, load_noun

REPO = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("cli_reference", REPO / "docs" / "cli_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _every_command(command: Any, path: str) -> list[tuple[str, Any]]:
    """Read from the command tree itself, not through the generator's walk."""
    found = [(path, command)]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if not sub.hidden:
            found += _every_command(sub, f"{path} {name}")
    return found


def _sections(page: str) -> dict[str, str]:
    """Each command's section of the page, by the command path in its heading."""
    parts = re.split(r"^#{2,4} (fleetctl[\w -]*)$", page, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.fixture(scope="module")
def sections() -> dict[str, str]:
    return _sections(_generator().render())


COMMANDS = [pair for noun in NOUNS for pair in _every_command(load_noun(noun), f"fleetctl {noun}")]


def test_the_reference_has_a_section_for_every_command_and_nothing_else(sections: dict[str, str]) -> None:
    assert sorted(sections) == sorted(["fleetctl", *(path for path, _ in COMMANDS)])


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[path for path, _ in COMMANDS])
def test_each_section_is_that_commands_help(sections: dict[str, str], path: str, command: Any) -> None:
    section = sections[path]
    assert f"Usage: {path}" in section
    options = [opt for param in command.params if not getattr(param, "hidden", False) for opt in param.opts]
    assert [opt for opt in options if opt.startswith("-") and opt not in section] == []


def test_the_root_section_lists_every_noun(sections: dict[str, str]) -> None:
    listed = re.findall(r"^  ([a-z-]+) ", sections["fleetctl"].split("Commands:")[1], flags=re.MULTILINE)
    assert listed == list(NOUNS)
