"""`fleetctl config`: the resolved settings and where each came from."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from fleetctl.cli import context
from fleetctl.cli.output import OUTPUT_OPTION, OutputFormat, emit, simple_table

if TYPE_CHECKING:
    from fleetctl.config import Settings


def _temporal_rows(s: Settings) -> list[dict[str, Any]]:
    """What fleetctl connects to Temporal with, each part where it came from: its own
    settings, or the profile of Temporal's config file (`temporal.*` rows)."""
    from fleetctl.connections.temporal_client import resolve

    return [
        {"setting": f"temporal.{name.removeprefix('temporal_')}", "value": value, "source": source}
        for name, (value, source) in resolve(s).sources.items()
    ]


def show_config(ctx: typer.Context, output: OutputFormat = OUTPUT_OPTION) -> None:
    """Show the resolved settings and where each came from."""
    from dataclasses import asdict

    from fleetctl.config import SECRET_SETTINGS
    from fleetctl.db.engine import describe
    from fleetctl.remediation.rma import redact

    s = context.settings(ctx)
    values = {k: v for k, v in asdict(s).items() if k != "sources"}
    values["db_url"] = describe(s.db_url)
    values.update({k: "(set)" for k in SECRET_SETTINGS if values[k]})
    # URLs may carry user:password or a token in the query (the webhook's often do).
    values = {k: redact(v, [getattr(s, name) for name in SECRET_SETTINGS]) for k, v in values.items()}
    rows = [{"setting": k, "value": v, "source": s.sources.get(k, "")} for k, v in values.items()]
    rows += _temporal_rows(s)
    emit(
        rows,
        output,
        lambda data, wide: simple_table(
            "fleetctl settings", ["setting", "value", "source"], [[r["setting"], r["value"], r["source"]] for r in data]
        ),
    )
