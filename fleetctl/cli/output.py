"""How every command prints: one listing format switch, one error line, one exit-code map."""

from __future__ import annotations

import enum
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from fleetctl.text import bounded, printable

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
    from rich.text import Text

# Exit codes shared by every command (docs/operations.md, "Output conventions").
EXIT_OK = 0
EXIT_OPERATIONAL = 1
EXIT_USAGE = 2
EXIT_CHECK_FAILED = 3
EXIT_CHECK_ERROR = 4

# The width tables are laid out in when no standard stream is a terminal and COLUMNS is unset
# (cron, a CI log): as wide as a wide terminal, not rich's 80 nor unbounded (a reason of a
# thousand characters would make every line of the listing that long).
PIPED_WIDTH = 120


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
    from datetime import date, datetime, timedelta

    if isinstance(value, datetime):
        value = value if value.tzinfo else value.replace(tzinfo=UTC)
        # One width (milliseconds always), so the strings sort as the times do.
        return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
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


def emit(
    data: Any,
    output: OutputFormat,
    table: Callable[[Any, bool], RenderableType] | None = None,
    empty: str | None = None,
) -> None:
    """Print `data` as JSON/YAML, or hand it to `table(data, wide)` for a rich renderable. An
    empty listing in a table is the one line `empty` ("No nodes.") on stderr, as kubectl's
    "No resources found.": not a row of bare headers, and nothing on stdout for a script."""
    if empty is not None and output in (OutputFormat.table, OutputFormat.wide) and not data:
        typer.echo(empty, err=True)
        return
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
        renderable = (
            table(data, output is OutputFormat.wide) if table else json.dumps(data, indent=2, default=machine_value)
        )
        # Not cropped to the terminal's width: a line that cannot fit (a name longer than the
        # terminal) wraps there, as kubectl's does, instead of losing its end.
        stdout_console().print(renderable, crop=False)


def stdout_console() -> Console:
    """The rich console every command prints its tables and pages on. Redirected (`| grep`,
    `> file`) it lays them out at the width of the terminal the command was typed in (stdin's
    or stderr's, or COLUMNS), else at PIPED_WIDTH. A reader of stdout that has gone (`| head`)
    raises BrokenPipeError, which fleetctl.cli.main ends quietly; rich's own handling would
    exit 1."""
    from rich.console import Console

    class PipeAware(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError

    return PipeAware(width=None if terminal_width_known() else PIPED_WIDTH)


def terminal_width_known() -> bool:
    """Whether rich can tell the terminal's width: COLUMNS, or a standard stream that is one."""
    if os.environ.get("COLUMNS", "").isdigit():
        return True
    for fd in (0, 1, 2):
        try:
            os.get_terminal_size(fd)
        except OSError:
            continue
        return True
    return False


SORT_BY_OPTION = typer.Option(
    None, "--sort-by", help="a field of -o json's rows to sort by (e.g. state, rack, state_since)"
)


def sorted_rows(rows: list[dict[str, Any]], key: str | None) -> list[dict[str, Any]]:
    """`rows` by the field `key` (as -o json names it), rows without it last; a field no row
    has is a usage error that names the fields there are."""
    if key is None or not rows:
        return rows
    if not any(key in r for r in rows):
        fail(f"--sort-by {key!r}: no such field (one of: {', '.join(rows[0])})", EXIT_USAGE)

    def order(row: dict[str, Any]) -> tuple[int, float, str]:
        v = row.get(key)
        if v is None:
            return (2, 0, "")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return (0, v, "")
        return (1, 0, v if isinstance(v, str) else json.dumps(v, default=machine_value, sort_keys=True))

    return sorted(rows, key=order)


def age(since: Any, now: Any = None) -> str:
    """How long ago, as kubectl's AGE: 45s, 12m, 3h12m, 2d4h."""
    from datetime import datetime

    if since is None:
        return ""
    since = since if since.tzinfo else since.replace(tzinfo=UTC)
    seconds = max(0, int(((now or datetime.now(UTC)) - since).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours < 2:
        return f"{minutes}m"
    if days < 2:
        return f"{hours}h{minutes % 60}m" if hours < 10 else f"{hours}h"
    return f"{days}d{hours % 24}h" if days < 10 else f"{days}d"


def shown(value: Any) -> Text:
    """A value for a human: a rich Text (never parsed as rich markup, so `[link=...]` in a kernel
    message stays text) with control characters escaped (the database keeps them raw). Every
    table and detail view prints recorded text through this."""
    from rich.text import Text

    if isinstance(value, Text):
        return value
    return Text(printable("" if value is None else str(value)))


def simple_table(title: str | None, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> _Table:
    """Rows given as sequences, one cell per header: column_table's table, its columns made
    from the headers."""
    return column_table([Column(h, itemgetter(i)) for i, h in enumerate(headers)], rows, title=title)


@dataclass(frozen=True)
class Column:
    """One column of a noun's table: its header and how a row (the dict that -o json prints)
    gives its cell. Each noun defines its columns once, as data, for every view that lists it."""

    header: str
    cell: Callable[[Any], Any]
    wide: bool = False  # only with -o wide
    # Shortened in a narrow terminal only after the other columns have given up their width
    # (the cells an operator scans: state, health). The first column (the name) is never
    # shortened at all, as kubectl never cuts NAME.
    whole: bool = False
    # Left out of a listing, as kubectl leaves out its columns of priority above 0, where
    # keeping it would cut a `whole` column or the name: a cell an operator scans is worth
    # more whole than this one is elided.
    secondary: bool = False


def column_table(
    columns: Sequence[Column], rows: Sequence[Any], wide: bool = False, title: str | None = None
) -> _Table:
    """`rows` as a table of `columns`; a cell may be a rich renderable (a coloured state). A
    listing (no title) has no borders and one line per row, its cells elided to fit; a titled
    section of a detail view has borders, and its cells wrap to fit. Either way the first
    column keeps its full width."""
    chosen = [c for c in columns if wide or not c.wide]
    cells = [[_cell(c.cell(r)) for c in chosen] for r in rows]
    return _Table(chosen, cells, title)


# A listing's columns are two spaces apart, none at the edges (as kubectl's, whose columns
# are three apart); a bordered section pads each cell with a space on either side and adds a
# rule between columns and one at each edge.
_GAP = 2
# The narrowest a shortened column gets: an elided cell keeps a character and its ellipsis, a
# wrapped one a few characters a line.
_MIN_ELIDED, _MIN_WRAPPED = 4, 6


def fit_widths(natural: Sequence[int], whole: Sequence[bool], available: int, floors: Sequence[int]) -> list[int]:
    """Column widths whose sum fits `available`: the widest column that may give gives one
    cell at a time, the others (`whole`) only when no other can, none below its floor (or
    its natural width, when less). The first column never gives: when the rest cannot make
    room, the sum is more than `available` (a terminal wraps the line; nothing is cut)."""
    widths = list(natural)
    floors = [min(n, f) for n, f in zip(natural, floors, strict=False)]
    excess = sum(widths) - available
    for tier in (False, True):
        while excess > 0:
            givers = [i for i in range(1, len(widths)) if whole[i] == tier and widths[i] > floors[i]]
            if not givers:
                break
            widest = max(givers, key=lambda k: widths[k])
            widths[widest] -= 1
            excess -= 1
    return widths


def listing_widths(
    natural: Sequence[int],
    whole: Sequence[bool],
    secondary: Sequence[bool],
    available: int,
    floors: Sequence[int],
) -> list[int | None]:
    """A listing's column widths (None: the column left out), columns _GAP apart: fit_widths,
    after leaving out the `secondary` columns, the last first, while keeping them would cut a
    `whole` column (the first included: the line would be longer than `available`)."""
    kept = list(range(len(natural)))
    while True:
        widths = fit_widths(
            [natural[i] for i in kept],
            [whole[i] for i in kept],
            available - _GAP * (len(kept) - 1),
            [floors[i] for i in kept],
        )
        fits = sum(widths) + _GAP * (len(kept) - 1) <= available and all(
            w >= natural[i] for w, i in zip(widths, kept, strict=True) if whole[i]
        )
        dropping = [i for i in kept if secondary[i]]
        if fits or not dropping:
            placed = dict(zip(kept, widths, strict=True))
            return [placed.get(i) for i in range(len(natural))]
        kept.remove(dropping[-1])


# A wrapped cell breaks between words; a word longer than this may be broken too.
_LONGEST_WORD = 20


class _Table:
    """A table fitted to the terminal as kubectl's and sinfo's are (fit_widths). A listing
    keeps one line per row (grep, sort and wc -l work on it): shortened cells end in an
    ellipsis. A titled section wraps them instead, so that nothing an operator reads there
    (a GPU's UUID, a reason) is lost: between words while they fit, then within them; and
    when even that is wider than the terminal, without its borders."""

    def __init__(self, columns: Sequence[Column], cells: list[list[RenderableType]], title: str | None) -> None:
        self.columns, self.cells, self.title = columns, cells, title

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.box import HEAVY_HEAD
        from rich.table import Table

        natural = [
            max([cell_width(c.header), *(cell_width(row[i]) for row in self.cells)]) for i, c in enumerate(self.columns)
        ]
        whole = [i == 0 or c.whole for i, c in enumerate(self.columns)]
        boxed = False
        if self.title is None:
            placed = self._listing_widths(natural, whole, options.max_width)
        else:
            boxed, placed = self._section_widths(natural, whole, options.max_width)
        kept = [i for i, w in enumerate(placed) if w is not None]
        frame = _GAP * len(kept) + (len(kept) + 1 if boxed else -_GAP)
        table = Table(
            title=shown(self.title) if self.title is not None else None,
            header_style="bold",
            box=HEAVY_HEAD if boxed else None,  # rich's default box, or a listing's none
            pad_edge=boxed,
        )
        for i in kept:
            wraps = self.title is not None and i > 0
            table.add_column(
                self.columns[i].header, width=placed[i], no_wrap=not wraps, overflow="fold" if wraps else "ellipsis"
            )
        for row in self.cells:
            table.add_row(*(row[i] for i in kept))
        needed = sum(placed[i] or 0 for i in kept) + frame
        yield from console.render(table, options.update(width=needed) if needed > options.max_width else options)

    def _listing_widths(self, natural: list[int], whole: list[bool], available: int) -> list[int | None]:
        """listing_widths; with -o wide, no column left out, and none of the default view's
        narrower than it is there (the wide-only columns give first, then the line wraps)."""
        elided = [_MIN_ELIDED] * len(natural)
        secondary = [c.secondary for c in self.columns]
        if not any(c.wide for c in self.columns):
            return listing_widths(natural, whole, secondary, available, elided)
        default = [i for i, c in enumerate(self.columns) if not c.wide]
        as_default = listing_widths(
            [natural[i] for i in default],
            [whole[i] for i in default],
            [secondary[i] for i in default],
            available,
            [elided[i] for i in default],
        )
        floors = list(elided)
        for i, w in zip(default, as_default, strict=True):
            floors[i] = max(_MIN_ELIDED, w or 0)
        return listing_widths(natural, whole, [False] * len(natural), available, floors)

    def _section_widths(self, natural: list[int], whole: list[bool], available: int) -> tuple[bool, list[int | None]]:
        """A titled section's widths: with borders while they fit, then without (none left out)."""
        words = [
            max([word_width(c.header), *(word_width(row[i]) for row in self.cells)]) for i, c in enumerate(self.columns)
        ]
        least = [_MIN_WRAPPED] * len(natural)
        for boxed, floors in [(True, words), (True, least), (False, words), (False, least)]:
            frame = _GAP * len(natural) + (len(natural) + 1 if boxed else -_GAP)
            widths = fit_widths(natural, whole, available - frame, floors)
            if sum(widths) + frame <= available:
                break
        placed: list[int | None] = list(widths)
        return boxed, placed


def word_width(value: Any) -> int:
    """How wide a value's longest word is (at most _LONGEST_WORD): the narrowest a wrapped
    column holding it can be without breaking a word."""
    text = value if isinstance(value, str) else getattr(value, "plain", "")
    return min(_LONGEST_WORD, max((cell_width(word) for word in text.split()), default=1))


def cell_width(value: Any) -> int:
    """How many terminal cells a value takes on its widest line."""
    from rich.cells import cell_len

    if isinstance(value, str):
        return max((cell_len(line) for line in value.splitlines()), default=0)
    if hasattr(value, "plain"):
        return cell_width(value.plain)
    return 1


def _cell(value: Any) -> RenderableType:
    """A rich renderable as it is (a coloured state); anything else as shown() prints it."""
    return value if hasattr(value, "__rich_console__") else shown(value)
