"""How every command prints: one listing format switch, one error line, one exit-code map."""

from __future__ import annotations

import enum
import json
import sys
from dataclasses import dataclass
from typing import Any, Callable, NoReturn, Sequence

import typer

from fleetctl.text import printable

# Exit codes shared by every command (see ARCHITECTURE.md).
EXIT_OK = 0
EXIT_OPERATIONAL = 1
EXIT_USAGE = 2
EXIT_CHECK_FAILED = 3
EXIT_CHECK_ERROR = 4


class OutputFormat(str, enum.Enum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


OUTPUT_OPTION = typer.Option(OutputFormat.table, "--output", "-o", help="table, wide, json or yaml")


def fail(message: str, code: int = EXIT_OPERATIONAL) -> NoReturn:
    """Print one readable line on stderr and exit; never a traceback."""
    typer.echo(f"error: {printable(message, keep_newlines=False)}", err=True)
    raise typer.Exit(code)


def within(low: float, high: float) -> Callable[[Any, Any, Any], Any]:
    """A typer callback bounding a numeric option at the edge: a value outside [low, high]
    (NaN and infinities included) is one line and exit 2, before anything runs."""
    import math

    def check(_ctx: Any, param: Any, value: Any) -> Any:
        if value is not None and not (math.isfinite(value) and low <= value <= high):
            name = param.opts[0] if param.param_type_name == "option" else (param.metavar or param.name)
            fail(f"{name} must be between {low} and {high}, not {value}", EXIT_USAGE)
        return value
    return check


def emit(data: Any, output: OutputFormat, table: Callable[[Any, bool], Any] | None = None) -> None:
    """Print `data` as JSON/YAML, or hand it to `table(data, wide)` for a rich renderable."""
    if output is OutputFormat.json:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    elif output is OutputFormat.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False))
    else:
        from rich.console import Console

        renderable = table(data, output is OutputFormat.wide) if table else json.dumps(data, indent=2, default=str)
        Console().print(renderable)


def shown(value: Any):
    """A value for a human: a rich Text (never parsed as rich markup, so `[link=...]` in a kernel
    message stays text) with control characters escaped (the database keeps them raw). Every
    table and detail view prints recorded text through this."""
    from rich.text import Text

    if isinstance(value, Text):
        return value
    return Text(printable("" if value is None else str(value)))


def simple_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]):
    from rich.table import Table

    t = Table(title=None if title is None else shown(title), header_style="bold")
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*(shown(v) for v in r))
    return t


@dataclass(frozen=True)
class Column:
    """One column of a noun's table: its header and how a row (the dict that -o json prints)
    gives its cell. Each noun defines its columns once, as data, for every view that lists it."""

    header: str
    cell: Callable[[dict], Any]
    wide: bool = False  # only with -o wide


def column_table(columns: Sequence[Column], rows: Sequence[dict], wide: bool = False, title: str | None = None):
    """`rows` as a table of `columns`; a cell may be a rich renderable (a coloured state). A
    listing has no borders; a titled section of a detail view has them, as simple_table's do."""
    from rich.table import Table

    chosen = [c for c in columns if wide or not c.wide]
    table = Table(title=title, header_style="bold") if title else Table(header_style="bold", box=None)
    for c in chosen:
        table.add_column(c.header)
    for r in rows:
        cells = (c.cell(r) for c in chosen)
        table.add_row(*(v if hasattr(v, "__rich_console__") else "" if v is None else str(v) for v in cells))
    return table
