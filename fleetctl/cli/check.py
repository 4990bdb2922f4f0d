"""`fleetctl check`: the check catalog, and judging a saved tool output offline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from fleetctl.cli import context
from fleetctl.cli.output import (
    EXIT_CHECK_ERROR,
    EXIT_CHECK_FAILED,
    EXIT_USAGE,
    OUTPUT_OPTION,
    Column,
    OutputFormat,
    column_table,
    emit,
    fail,
    simple_table,
)

if TYPE_CHECKING:
    from rich.console import RenderableType

app = typer.Typer(help="Node checks: what runs on a node, and how its output is judged.", no_args_is_help=True)

_EXIT_BY_STATUS = {"pass": 0, "warn": 0, "fail": EXIT_CHECK_FAILED, "error": EXIT_CHECK_ERROR}


CHECK_COLUMNS = (
    Column("NAME", lambda r: r["name"], whole=True),
    Column("TOOL", lambda r: r["tool"], whole=True),  # what tells nvidia-smi-q from nvidia-smi-query
    Column("KIND", lambda r: r["kind"], secondary=True),  # the parser: the name says as much
    Column("TYPICAL", lambda r: _duration(r["typical_duration_s"])),
    Column("JUDGES", lambda r: r["judges"]),
    Column("COMMAND", lambda r: " ".join(r["argv"]), wide=True),
)
SUITE_COLUMNS = (
    Column("NAME", lambda r: r["name"], whole=True),
    Column("CHECKS", lambda r: ",".join(r["checks"])),
    Column("TYPICAL", lambda r: _duration(r["typical_duration_s"])),
    Column("DESCRIPTION", lambda r: r["description"], wide=True),
)


@app.command("suites")
def list_suites(ctx: typer.Context, output: OutputFormat = OUTPUT_OPTION) -> None:
    """List the suites (what burn-in, recheck and sweeps run): their checks and how long they take."""
    from fleetctl.checks.catalog import CHECKS
    from fleetctl.checks.suites import SuiteError, load_suites

    try:
        suites = load_suites(context.settings(ctx).suites_dir or None)
    except SuiteError as exc:
        fail(str(exc), EXIT_USAGE)
    rows = [
        {
            "name": s.name,
            "description": s.description,
            "checks": list(s.checks),
            "typical_duration_s": sum(CHECKS[c].typical_duration_s for c in s.checks),
        }
        for s in suites.values()
    ]
    emit(rows, output, lambda data, wide: column_table(SUITE_COLUMNS, data, wide))


PROFILE_COLUMNS = (
    Column("NAME", lambda r: r["name"], whole=True),
    Column("GPUS", lambda r: str(r["gpu_count"])),
    Column("IB", lambda r: f"{r['ib_port_count']}x{r['ib_rate_gbps']:g}" if r["ib_port_count"] else "-"),
    Column("ROCE", lambda r: f"{r['roce_port_count']}x{r['roce_rate_gbps']:g}" if r["roce_port_count"] else "-"),
    Column("SOURCE", lambda r: r["source"]),
    Column("DESCRIPTION", lambda r: r["description"], wide=True),
)


@app.command("profiles")
def list_profiles(ctx: typer.Context, output: OutputFormat = OUTPUT_OPTION) -> None:
    """List the GPU profiles checks are judged against: the packaged ones and the site's
    (the profiles_dir setting, FLEETCTL_PROFILES_DIR), each validated as it is loaded."""
    from fleetctl.checks.profiles import ProfileError, load_profile, profile_names, profile_source

    site_dir = _profiles_dir(ctx)
    try:
        profiles = [(load_profile(name, site_dir), profile_source(name, site_dir)) for name in profile_names(site_dir)]
    except ProfileError as exc:
        fail(str(exc), EXIT_USAGE)
    rows = [
        {
            "name": p.name,
            "description": p.description,
            "gpu_count": p.gpu_count,
            "ib_port_count": p.ib_port_count,
            "ib_rate_gbps": p.ib_rate_gbps,
            "roce_port_count": p.roce_port_count,
            "roce_rate_gbps": p.roce_rate_gbps,
            "source": source,
        }
        for p, source in profiles
    ]
    emit(rows, output, lambda data, wide: column_table(PROFILE_COLUMNS, data, wide))


XID_POLICY_COLUMNS = (
    Column("KIND", lambda r: r["kind"]),
    Column("CODE", lambda r: r["key"], whole=True),
    Column("SEVERITY", lambda r: r["severity"]),
    Column("CATALOG", lambda r: r["catalog"]),
    Column("DRAINS", lambda r: r["drains"]),
    Column("SOURCE", lambda r: r["source"]),
    Column("NAME", lambda r: r["name"], wide=True),
)


@app.command("xid-policy")
def xid_policy(
    ctx: typer.Context,
    policy_file: Path | None = typer.Option(
        None, "--file", help="judge this policy file instead of the xid_policy setting's (to try one before use)"
    ),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """The effective Xid and signature table: each code's severity and when it drains the node,
    as NVIDIA's catalog says or the site's policy file (the xid_policy setting) changes it, and
    where each row came from. A broken file: one line, exit 2."""
    from fleetctl.checks.xid_policy import XidPolicyError, load_xid_policy
    from fleetctl.nodes.health import effective_table

    settings = context.settings(ctx)
    path = str(policy_file) if policy_file is not None else (settings.xid_policy if settings is not None else "")
    try:
        policy = load_xid_policy(path or None)
    except XidPolicyError as exc:
        fail(str(exc), EXIT_USAGE)
    rows = [
        {
            "kind": row.kind,
            "key": row.key,
            "name": row.name,
            "catalog": row.catalog,
            "severity": row.severity,
            "drains": row.drains,
            "source": row.source,
        }
        for row in effective_table(policy)
    ]
    emit(rows, output, lambda data, wide: column_table(XID_POLICY_COLUMNS, data, wide))


@app.command("list")
def list_checks(output: OutputFormat = OUTPUT_OPTION) -> None:
    """List the checks: name, tool, kind of parser, typical duration, and the nodes each judges
    (nvlink-domain: only those whose profile has a multi-node NVLink domain, GB200)."""
    from fleetctl.checks.catalog import CHECKS

    tools = check_tools({spec.name: (_command_words(spec.argv), spec.kind) for spec in CHECKS.values()})
    rows = [
        {
            "name": spec.name,
            "tool": tools[spec.name],
            "kind": spec.kind,
            "typical_duration_s": spec.typical_duration_s,
            "argv": list(spec.argv),
            # Which nodes the check judges: a suite lists it for all, the others pass over it.
            "judges": "nvlink-domain" if spec.nvlink_domain_only else "all",
            "description": spec.description,
        }
        for spec in sorted(CHECKS.values(), key=lambda spec: spec.name)  # as kubectl: by name
    ]

    emit(rows, output, lambda data, wide: column_table(CHECK_COLUMNS, data, wide))


def _command_words(argv: Sequence[str]) -> list[str]:
    """The words of a check's command; of a shell script (`sh -c '...'`), its first command's."""
    return list(argv) if argv[0] != "sh" else argv[2].split()


def check_tools(commands: Mapping[str, tuple[list[str], str]]) -> dict[str, str]:
    """The TOOL each check (name -> (its command's words, its kind)) is listed with: the
    program, and where checks of one kind run one program, its words up to the first that
    tells them apart, each cut at its `=` (nvidia-smi-query: `nvidia-smi --query-gpu`;
    nvidia-smi-q: `nvidia-smi -q`), so two names such as those never read as one cut short."""
    alike: dict[tuple[str, str], list[list[str]]] = {}
    for words, kind in commands.values():
        alike.setdefault((words[0], kind), []).append(words)
    tools = {}
    for name, (words, kind) in commands.items():
        group = alike[(words[0], kind)]
        differs = next((i for i in range(1, len(words)) if any(w[i : i + 1] != words[i : i + 1] for w in group)), 0)
        tools[name] = " ".join(word.split("=")[0] for word in words[: differs + 1])
    return tools


@app.command("parse")
def parse(
    ctx: typer.Context,
    kind: str = typer.Argument(
        ...,
        help="nccl, nccl-pairs, hpl, dcgm, dcgm-health, nvidia-smi, nvidia-smi-memory, xid, ib, ib-rails, firmware, "
        "pcie, pcie-aer, memory, cpu, disk, services, versions, clock or imex",
    ),
    file: Path = typer.Argument(..., help="a saved output of the tool ('-' for stdin)"),
    profile: str | None = typer.Option(
        None,
        "--profile",
        "-p",
        help="GPU profile to judge against, e.g. h100-sxm (`fleetctl check profiles` lists them)",
    ),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Judge a saved tool output. Exit 0 pass/warn, 3 fail, 4 unjudgeable, 2 usage error."""
    from fleetctl.checks import KINDS, judge
    from fleetctl.checks.profiles import ProfileError, load_profile

    if kind not in KINDS:
        fail(f"unknown check kind {kind!r}; use one of: {', '.join(KINDS)}", EXIT_USAGE)
    site_dir = _profiles_dir(ctx)
    if profile is not None:
        try:
            load_profile(profile, site_dir)
        except ProfileError as exc:
            fail(str(exc), EXIT_USAGE)
    text = _read(file)
    result = judge(kind, text, profile, site_dir).to_dict()

    def table(data: dict[str, Any], wide: bool) -> RenderableType:
        rows = [["status", data["status"]], ["reason", data["reason"]]]
        rows += [
            [key, _short(value)]
            for key, value in data["metrics"].items()
            if wide or not isinstance(value, (list, dict))
        ]
        rows += [
            [f"finding ({f['severity']})", f"{f['where']}: {f['what']}" if f["where"] else f["what"]]
            for f in data["findings"]
        ]
        return simple_table(f"{kind} check", ["FIELD", "VALUE"], rows)

    emit(result, output, table)
    raise typer.Exit(_EXIT_BY_STATUS[result["status"]])


def _profiles_dir(ctx: typer.Context) -> str | None:
    """The profiles_dir setting. This app run alone (its tests) has no root settings: then
    checks.profiles reads FLEETCTL_PROFILES_DIR itself, as it does in every process."""
    settings = context.root_settings(ctx)
    return (settings.profiles_dir or None) if settings is not None else None


def _read(file: Path) -> str:
    if str(file) == "-":
        import sys

        return sys.stdin.read()
    try:
        return file.read_text(errors="replace")
    except FileNotFoundError:
        fail(f"no such file: {file}", EXIT_USAGE)
    except (IsADirectoryError, PermissionError) as exc:
        fail(f"cannot read {file}: {exc.strerror}", EXIT_USAGE)


def _duration(seconds: float) -> str:
    return f"{seconds:g}s" if seconds < 120 else f"{seconds / 60:g}m"


def _short(value: object) -> str:
    text = str(value)
    return text if len(text) <= 100 else text[:97] + "..."
