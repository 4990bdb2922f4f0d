"""The CLI reference page, written from the Typer app at every docs build: each command's
`--help` as `fleetctl` prints it, so the reference cannot drift from the code.

Registered in mkdocs.yml as a hook (`on_files` adds the page `cli.md`); nothing of it is
kept in git. `tests/docs/test_cli_reference.py` holds the page to every command."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

PAGE = "cli.md"
# Help is laid out for this width, whatever terminal runs the build: the page is the same everywhere.
WIDTH = 100


def commands() -> Iterator[tuple[str, Any, Any]]:
    """(command path, command, its context) for `fleetctl` and every command under it, in the
    order `--help` lists them; hidden commands left out."""
    import typer.main

    from fleetctl.cli.main import NOUNS, app, load_noun

    root = typer.main.get_command(app)
    root_ctx = root.context_class(root, info_name="fleetctl", terminal_width=WIDTH, max_content_width=WIDTH)
    yield "fleetctl", root, root_ctx
    for name in NOUNS:
        yield from _walk(load_noun(name), name, root_ctx)


def _walk(command: Any, name: str, parent: Any) -> Iterator[tuple[str, Any, Any]]:
    ctx = command.context_class(command, parent=parent, info_name=name)
    yield ctx.command_path, command, ctx
    for sub_name in command.list_commands(ctx) if hasattr(command, "list_commands") else ():
        sub = command.get_command(ctx, sub_name)
        if sub is not None and not sub.hidden:
            yield from _walk(sub, sub_name, ctx)


def render() -> str:
    """The page: one section per command, its help in a plain-text block."""
    lines = [
        "# CLI reference",
        "",
        "Generated from `fleetctl.cli.main.app` when the docs are built (`docs/cli_reference.py`):",
        "each section is what `--help` prints for that command. Exit codes: 0 done, 1 an operational",
        "error, 2 a usage error; `check parse` adds 3 (the check failed) and 4 (its output could not be judged).",
    ]
    for path, command, ctx in commands():
        depth = min(path.count(" ") + 2, 4)
        lines += ["", f"{'#' * depth} {path}", "", "```text", command.get_help(ctx).rstrip(), "```"]
    return "\n".join(lines) + "\n"


def on_files(files: Any, config: Any) -> Any:
    """mkdocs hook: the page joins the site's files, generated in memory."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=render()))
    return files
