"""How every command prints: one listing format switch, one error line, one exit-code map."""

from __future__ import annotations

import enum
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, NoReturn, Sequence

import typer

from fleetctl.text import bounded, printable

# Exit codes shared by every command (see ARCHITECTURE.md).
EXIT_OK = 0
EXIT_OPERATIONAL = 1
EXIT_USAGE = 2
EXIT_CHECK_FAILED = 3
EXIT_CHECK_ERROR = 4

# The width tables are laid out in when the output is not a terminal.
LINE_WIDTH_UNBOUNDED = 10_000


class OutputFormat(str, enum.Enum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"
    names = "name"  # one name per line, as kubectl's -o name (`name` itself is Enum's)


OUTPUT_OPTION = typer.Option(OutputFormat.table, "--output", "-o", help="table, wide, json, yaml or name")
# The key that names a row, for -o name: the first a row has.
NAME_KEYS = ("name", "id", "job_id", "node")


def machine_value(value: Any) -> Any:
    """A value JSON and YAML output cannot hold as it is: times as ISO 8601 in UTC with a Z
    (the database keeps UTC; SQLite hands it back without a zone), to the millisecond;
    durations in seconds."""
    from datetime import date, datetime, timedelta, timezone

    if isinstance(value, datetime):
        value = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        # One width (milliseconds always), so the strings sort as the times do.
        return value.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)


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


def free_text(required: bool = False) -> Callable[[Any, Any, Any], Any]:
    """A typer callback for text an operator types (a reason, a message): bounded where it
    enters (fleetctl.text.bounded: MAX_TEXT characters, and argv's undecodable bytes, which
    Python hands over as lone surrogates, replaced), so no record or scheduler call can fail
    on it. What no record can hold after that (a NUL), or a `required` text that says
    nothing, is one line and exit 2, before anything runs."""

    def check(_ctx: Any, param: Any, value: Any) -> Any:
        if value is None:
            return value
        name = param.opts[0] if param.param_type_name == "option" else (param.metavar or param.name)
        if "\0" in value:  # bounded would replace it: refused, so the operator knows
            fail(f"{name}: a NUL character cannot be recorded", EXIT_USAGE)
        text = bounded(value)
        if required and not text.strip():
            fail(f"{name} must say why", EXIT_USAGE)
        return text
    return check


def emit(data: Any, output: OutputFormat, table: Callable[[Any, bool], Any] | None = None) -> None:
    """Print `data` as JSON/YAML, or hand it to `table(data, wide)` for a rich renderable."""
    if output is OutputFormat.json:
        sys.stdout.write(json.dumps(data, indent=2, default=machine_value) + "\n")
    elif output is OutputFormat.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(json.loads(json.dumps(data, default=machine_value)), sort_keys=False))
    elif output is OutputFormat.names:
        for row in data if isinstance(data, list) else [data]:
            key = next((k for k in NAME_KEYS if isinstance(row, dict) and row.get(k) is not None), None)
            if key is None:
                fail("-o name: these rows have no name; use -o json", EXIT_USAGE)
            sys.stdout.write(printable(str(row[key]), keep_newlines=False) + "\n")
    else:
        from rich.console import Console

        renderable = table(data, output is OutputFormat.wide) if table else json.dumps(data, indent=2, default=machine_value)
        console = Console()
        if not console.is_terminal and "COLUMNS" not in os.environ:
            # Redirected to a file or a pipe: nothing is cut to a terminal's width there.
            console = Console(width=LINE_WIDTH_UNBOUNDED)
        console.print(renderable)


SORT_BY_OPTION = typer.Option(None, "--sort-by", help="a field of -o json's rows to sort by (e.g. state, rack, state_since)")


def sorted_rows(rows: list[dict], key: str | None) -> list[dict]:
    """`rows` by the field `key` (as -o json names it), rows without it last; a field no row
    has is a usage error that names the fields there are."""
    if key is None or not rows:
        return rows
    if not any(key in r for r in rows):
        fail(f"--sort-by {key!r}: no such field (one of: {', '.join(rows[0])})", EXIT_USAGE)

    def order(row: dict) -> tuple:
        v = row.get(key)
        if v is None:
            return (2, 0, "")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return (0, v, "")
        return (1, 0, v if isinstance(v, str) else json.dumps(v, default=machine_value, sort_keys=True))
    return sorted(rows, key=order)


def age(since: Any, now: Any = None) -> str:
    """How long ago, as kubectl's AGE: 45s, 12m, 3h12m, 2d4h."""
    from datetime import datetime, timezone

    if since is None:
        return ""
    since = since if since.tzinfo else since.replace(tzinfo=timezone.utc)
    seconds = max(0, int(((now or datetime.now(timezone.utc)) - since).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours < 2:
        return f"{minutes}m"
    if days < 2:
        return f"{hours}h{minutes % 60}m" if hours < 10 else f"{hours}h"
    return f"{days}d{hours % 24}h" if days < 10 else f"{days}d"


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
    # Never shortened in a narrow terminal (the cells an operator scans: name, state,
    # health); the other columns give up their width first.
    whole: bool = False


def column_table(columns: Sequence[Column], rows: Sequence[dict], wide: bool = False, title: str | None = None):
    """`rows` as a table of `columns`; a cell may be a rich renderable (a coloured state). A
    listing has no borders and one line per row; a titled section of a detail view has
    borders, as simple_table's do, and wraps."""
    from rich.table import Table

    chosen = [c for c in columns if wide or not c.wide]
    cells = [[_cell(c.cell(r)) for c in chosen] for r in rows]
    if title:
        table = Table(title=title, header_style="bold")
        for c in chosen:
            table.add_column(c.header)
        for row in cells:
            table.add_row(*row)
        return table
    return _Listing(chosen, cells)


class _Listing:
    """A borderless listing fitted to the terminal as kubectl's and sinfo's are: one line per
    row (grep, sort and wc -l work on it); when the terminal is too narrow, the columns not
    marked `whole` give up width, widest first, their cells ending in an ellipsis."""

    def __init__(self, columns: Sequence[Column], cells: list[list[Any]]):
        self.columns, self.cells = columns, cells

    def __rich_console__(self, console, options):
        from rich.cells import cell_len
        from rich.table import Table

        def length(v: Any) -> int:
            return cell_len(v.plain) if hasattr(v, "plain") else 1
        widths = [max([len(c.header), *(length(row[i]) for row in self.cells)]) for i, c in enumerate(self.columns)]
        gap = 2  # a space either side of each column
        excess = sum(widths) + gap * len(widths) - options.max_width
        while excess > 0:
            shrinkable = [i for i, c in enumerate(self.columns) if not c.whole and widths[i] > max(3, len(c.header))]
            if not shrinkable:
                break
            i = max(shrinkable, key=lambda k: widths[k])
            step = min(excess, widths[i] - max(3, len(self.columns[i].header)))
            widths[i] -= step
            excess -= step
        table = Table(header_style="bold", box=None)
        for c, w in zip(self.columns, widths):
            table.add_column(c.header, width=w, no_wrap=True, overflow="ellipsis")
        for row in self.cells:
            table.add_row(*row)
        yield table


def _cell(value: Any):
    """A rich renderable as it is (a coloured state); anything else as shown() prints it."""
    return value if hasattr(value, "__rich_console__") else shown(value)
