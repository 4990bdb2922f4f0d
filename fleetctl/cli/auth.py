"""`fleetctl auth whoami`: the subject the front door authenticates and its roles per fleet."""

from __future__ import annotations

from typing import Any

import typer

from fleetctl.cli import context
from fleetctl.cli.output import EXIT_OPERATIONAL, EXIT_USAGE, OUTPUT_OPTION, OutputFormat, emit, fail, simple_table

app = typer.Typer(help="Who the front door says you are, and what you may do.", no_args_is_help=True)


def _table(data: dict[str, Any], _wide: bool) -> Any:
    return simple_table(
        f"{data['subject']} (by {data['via']})",
        ["fleet", "role"],
        [("every fleet" if fleet == "*" else fleet, role) for fleet, role in data["roles"].items()] or [("-", "none")],
    )


@app.command("whoami")
def whoami(ctx: typer.Context, output: OutputFormat = OUTPUT_OPTION) -> None:
    """The subject the front door (api_url) authenticates from your certificate or token, and
    the role it holds in each fleet ("*": every fleet not named)."""
    from fleetctl.authz.api_client import ApiError
    from fleetctl.authz.api_client import whoami as ask

    s = context.settings(ctx)
    if not s.api_url:
        fail("no front door: set api_url (FLEETCTL_API_URL) and its certificate or token", EXIT_USAGE)
    try:
        data = ask(s)
    except ApiError as exc:
        fail(str(exc), EXIT_OPERATIONAL)
    emit(data, output, _table)
