"""Every command of the CLI is classified; the decision for a subject, a command and a fleet;
what `--as` may say."""

from __future__ import annotations

import pytest
from typer.core import TyperGroup

from fleetctl.authz.commands import COMMANDS, Kind
from fleetctl.authz.decide import actor_for, authorize, valid_actor
from fleetctl.authz.roles import Role, parse_roles
from fleetctl.cli.main import NOUNS, load_noun

ROLES = parse_roles(
    """
subjects:
  vera: viewer
  olga: {"*": operator, lab: admin}
  adam: admin
groups:
  sre: operator
"""
)


def _paths(command, path: str) -> list[str]:
    """Every runnable command under `command`: leaves, and groups that run without a subcommand."""
    if not isinstance(command, TyperGroup):
        return [path]
    own = [path] if command.invoke_without_command else []
    return own + [p for name, sub in command.commands.items() for p in _paths(sub, f"{path} {name}")]


CLI_COMMANDS = sorted(p for noun in NOUNS for p in _paths(load_noun(noun), noun))


def test_every_command_of_the_cli_is_classified_and_nothing_else() -> None:
    assert sorted(set(CLI_COMMANDS) - set(COMMANDS)) == [], "classify each new command in fleetctl/authz/commands.py"
    assert sorted(set(COMMANDS) - set(CLI_COMMANDS)) == []


def test_the_roles_the_design_names() -> None:
    operator = ["node drain", "node undrain", "node admit", "node recheck", "node event", "job restart"]
    operator += ["rma confirm", "rma reject", "rma close"]
    admin = ["firmware rollout", "firmware rollout resume", "fleet resume-automation", "node retire"]
    admin += ["firmware baseline set", "schedule create", "schedule pause", "node import"]
    assert {p: COMMANDS[p].needs([]) for p in operator} == dict.fromkeys(operator, (Kind.WRITE, Role.OPERATOR))
    assert {p: COMMANDS[p].needs([]) for p in admin} == dict.fromkeys(admin, (Kind.WRITE, Role.ADMIN))
    assert COMMANDS["reconcile"].needs([]) == (Kind.READ, Role.VIEWER)
    assert COMMANDS["reconcile"].needs(["--fix"]) == (Kind.WRITE, Role.OPERATOR)


@pytest.mark.parametrize(
    ("subject", "requested", "actor"),
    [
        ("alice", None, "alice"),
        ("alice", "", "alice"),
        ("alice", "alice", "alice"),
        ("alice", "alice/ticket-42", "alice/ticket-42"),
        ("alice@example.com", "alice@example.com/chg.7", "alice@example.com/chg.7"),
        ("alice", "bob", None),
        ("alice", "bob/ticket-42", None),
        ("alice", "alice/", None),
        ("alice", "alice/a/b", None),
        ("alice", "alice/x y", None),
        ("alice", "alicex/1", None),
        ("alice", "runbook:xid-79", None),
    ],
)
def test_as_only_narrows(subject: str, requested: str | None, actor: str | None) -> None:
    assert actor_for(subject, requested) == actor
    assert actor is None or valid_actor(actor)


@pytest.mark.parametrize(
    ("subject", "groups", "command", "args", "fleet", "allowed", "reason"),
    [
        (
            "vera",
            (),
            "node drain",
            [],
            "default",
            False,
            "node drain needs the operator role in fleet default (vera holds viewer)",
        ),
        ("olga", (), "node drain", [], "default", True, "olga holds operator in fleet default"),
        (
            "olga",
            (),
            "firmware rollout",
            [],
            "default",
            False,
            "firmware rollout needs the admin role in fleet default (olga holds operator)",
        ),
        ("olga", (), "firmware rollout", [], "lab", True, "olga holds admin in fleet lab"),
        ("adam", (), "fleet resume-automation", [], "default", True, "adam holds admin in fleet default"),
        ("adam", (), "db prune", [], "default", False, "db prune is not run by the front door (process command)"),
        (
            "eve",
            (),
            "node drain",
            [],
            "default",
            False,
            "node drain needs the operator role in fleet default (eve holds no role)",
        ),
        ("eve", ("sre",), "node drain", [], "default", True, "eve holds operator in fleet default"),
        ("olga", (), "reconcile", ["--fix"], "default", True, "olga holds operator"),
        ("olga", (), "reconcile", [], "default", False, "reconcile is not run by the front door (read command)"),
        ("adam", (), "worker", [], "default", False, "worker is not run by the front door (process command)"),
        ("adam", (), "rm", [], "default", False, "'rm' is not a fleetctl command"),
    ],
)
def test_authorize(subject, groups, command, args, fleet, allowed, reason) -> None:
    decision = authorize(subject, ROLES, command, args, fleet, groups=groups)
    assert (decision.allowed, reason in decision.reason) == (allowed, True), decision
    assert decision.actor == (subject if allowed else "")


def test_as_naming_someone_else_is_denied_even_to_an_admin() -> None:
    decision = authorize("adam", ROLES, "node drain", [], "default", requested_actor="olga")
    assert not decision.allowed and decision.reason == "--as 'olga': adam may act only as adam or adam/WHY"
    assert authorize("adam", ROLES, "node drain", [], "default", requested_actor="adam/chg-1").actor == "adam/chg-1"
