"""The CLI's one path to the front door: with `api_url` set, a write command (fleetctl.authz.
commands) is not run here but sent there as its command line, with the content of every file
it names; the front door runs it as the authenticated subject and its output and exit code
come back. Reads and processes run here as before."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import typer

from fleetctl.cli.output import EXIT_OPERATIONAL, EXIT_USAGE, fail

if TYPE_CHECKING:
    from collections.abc import Callable

    from typer._click import Command

    from fleetctl.config import Settings

    NounLoader = Callable[[str], Command | None]

# What one request may ship: the files a write names (an inventory, a baseline, a kernel log).
MAX_FILES_BYTES = 8 * 1024 * 1024
# Parameters that name the nodes a command acts on, recorded in the audit trail.
NODE_PARAMETERS = ("node", "nodes", "name", "names")


def resolve(argv: Sequence[str], load: NounLoader) -> tuple[str, list[str], Command] | None:
    """(command path, the arguments after it, the command) of `argv` (the words after
    fleetctl's own options); None when argv names no command. `load` builds a noun's command
    (fleetctl.cli.main's, passed in: main imports this module)."""
    from typer.core import TyperGroup

    noun = load(argv[0]) if argv else None
    if noun is None:
        return None
    command, path, rest = noun, [argv[0]], list(argv[1:])
    while isinstance(command, TyperGroup) and rest and rest[0] in command.commands:
        command = command.commands[rest[0]]
        path.append(rest.pop(0))
    return " ".join(path), rest, command


def parameters(command: Command, name: str, args: Sequence[str]) -> dict[str, Any]:
    """The values `args` give `command`'s parameters, as click parses them; {} when they do
    not parse (the command itself says why when it runs)."""
    try:
        with command.make_context(name, list(args), resilient_parsing=True) as ctx:
            return dict(ctx.params)
    except Exception:  # noqa: BLE001  # a bad argument is the command's to report, not the audit's
        return {}


def path_parameters(command: Command) -> list[str]:
    """The parameters of `command` that name files (typed Path, Path | None, list[Path])."""
    named = []
    for param in command.params:
        annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
        if param.name and (annotation is Path or Path in get_args(annotation)):
            named.append(param.name)
    return named


def nodes_named(command: Command, name: str, args: Sequence[str]) -> list[str]:
    values = parameters(command, name, args)
    named: list[str] = []
    for key in NODE_PARAMETERS:
        value = values.get(key)
        if isinstance(value, str):
            named.append(value)
        elif isinstance(value, (list, tuple)):
            named.extend(v for v in value if isinstance(v, str))
    return named


def files_of(command: Command, name: str, args: Sequence[str]) -> dict[str, str]:
    """{argument as written: file content} of the arguments that give `command`'s file
    parameters a file here, for the front door to write where it runs."""
    values = parameters(command, name, args)
    named: set[Path] = set()
    for parameter in path_parameters(command):
        value = values.get(parameter)
        named |= {Path(v) for v in (value if isinstance(value, (list, tuple)) else [value]) if v is not None}
    shipped: dict[str, str] = {}
    for arg in args:
        value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
        path = Path(value)
        if value in shipped or path not in named or not path.is_file():
            continue
        try:
            shipped[value] = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"{value}: cannot be sent to the front door ({exc.__class__.__name__})", EXIT_USAGE)
    if sum(len(text) for text in shipped.values()) > MAX_FILES_BYTES:
        fail(f"the files named are larger than {MAX_FILES_BYTES} bytes together", EXIT_USAGE)
    return shipped


def forward_if_write(settings: Settings, argv: Sequence[str], load: NounLoader) -> None:
    """Send `argv` to the front door if it is a write, print what it said and exit with its
    exit code; return (run it here) otherwise."""
    from fleetctl.authz.api_client import ApiError, run_remote
    from fleetctl.authz.commands import Kind, rule_of

    resolved = resolve(argv, load)
    if resolved is None or "--help" in argv:
        return
    path, rest, command = resolved
    rule = rule_of(path)
    if rule is None or rule.needs(rest)[0] is not Kind.WRITE:
        return
    request = {
        "argv": list(argv),
        "fleet": None if settings.sources.get("fleet") == "default" else settings.fleet,
        "as": settings.operator or None,
        "files": files_of(command, path, rest),
    }
    try:
        answer = run_remote(settings, request)
    except ApiError as exc:
        fail(str(exc), EXIT_OPERATIONAL)
    sys.stdout.write(answer.stdout)
    sys.stderr.write(answer.stderr)
    raise typer.Exit(answer.exit_code)
