"""The roles file the admin keeps, read strictly; which role a subject holds in a fleet."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fleetctl.authz.roles import Role, RolesError, RolesFile, load_roles, parse_roles

ROLES = """
subjects:
  alice: {"*": operator, gpu-east: admin}
  bob: viewer
  carol@example.com: {gpu-west: admin, "*": viewer}
  dave: {gpu-east: viewer}
groups:
  sre: {"*": operator}
  firmware-team: {gpu-east: admin}
"""


@pytest.mark.parametrize(
    ("subject", "fleet", "groups", "role"),
    [
        ("alice", "default", (), Role.OPERATOR),
        ("alice", "gpu-east", (), Role.ADMIN),
        ("bob", "gpu-east", (), Role.VIEWER),
        ("carol@example.com", "gpu-west", (), Role.ADMIN),
        ("carol@example.com", "default", (), Role.VIEWER),
        ("dave", "gpu-east", (), Role.VIEWER),
        ("dave", "default", (), None),  # named for one fleet only
        ("mallory", "default", (), None),
        ("mallory", "default", ("sre",), Role.OPERATOR),
        ("bob", "gpu-east", ("sre", "firmware-team"), Role.ADMIN),  # the highest of them
        ("bob", "default", ("firmware-team",), Role.VIEWER),
        ("mallory", "default", ("no-such-group",), None),
    ],
)
def test_role_of(subject: str, fleet: str, groups: tuple[str, ...], role: Role | None) -> None:
    assert parse_roles(ROLES).role_of(subject, fleet, groups) == role


def test_a_fleets_own_entry_overrides_every_fleet_even_downwards() -> None:
    roles = parse_roles("subjects: {erin: {'*': admin, prod: viewer}}")
    assert (roles.role_of("erin", "lab"), roles.role_of("erin", "prod")) == (Role.ADMIN, Role.VIEWER)


def test_fleets_of_lists_each_fleet_named() -> None:
    assert parse_roles(ROLES).fleets_of("alice", ["firmware-team"]) == {"*": Role.OPERATOR, "gpu-east": Role.ADMIN}


def test_roles_are_ordered() -> None:
    assert Role.ADMIN.covers(Role.OPERATOR) and Role.OPERATOR.covers(Role.VIEWER) and Role.VIEWER.covers(Role.VIEWER)
    assert not Role.VIEWER.covers(Role.OPERATOR) and not Role.OPERATOR.covers(Role.ADMIN)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "subjects: {alice: superuser}",
            "roles: subjects.alice: 'superuser' is not a role (one of viewer, operator, admin)",
        ),
        ("subjects: {alice: {'*': root}}", "roles: subjects.alice.*: 'root' is not a role"),
        ("subjects:\n  alice: viewer\n  bob: viewer\n  alice: admin\n", "roles: line 4: 'alice' is written twice"),
        ("subjects: {alice: {prod: viewer, prod: admin}}", "'prod' is written twice"),
        ("users: {alice: viewer}", "roles: unknown key 'users' (expected subjects or groups)"),
        ("subjects: {runbook:x: admin}", "roles: subjects: 'runbook:x' is not a valid name"),
        ("subjects: {sweep/1: admin}", "roles: subjects: 'sweep/1' is not a valid name"),
        ("subjects: {alice: {'gpu east': admin}}", "roles: subjects.alice: 'gpu east' is not a fleet name or '*'"),
        ("subjects: {alice: {}}", "roles: subjects.alice: expected a role or a mapping"),
        ("subjects: [alice]", "roles: subjects: expected a mapping of names to roles"),
        ("- alice", "roles: expected a mapping with 'subjects' and 'groups'"),
        ("a: &x [1]\nb: *x\n", "YAML aliases are not allowed"),
        ("subjects: {alice: viewer", "roles: not valid YAML"),
    ],
)
def test_a_bad_roles_file_is_refused_in_one_line(text: str, error: str) -> None:
    with pytest.raises(RolesError) as refused:
        parse_roles(text)
    assert error in str(refused.value) and "\n" not in str(refused.value)


def test_an_empty_file_grants_nothing_and_a_missing_one_is_refused(tmp_path) -> None:
    (tmp_path / "empty.yaml").write_text("")
    assert load_roles(tmp_path / "empty.yaml") == RolesFile()
    with pytest.raises(RolesError, match="cannot read"):
        load_roles(tmp_path / "missing.yaml")


REPO = Path(__file__).resolve().parents[2]


def _names_an_actor(node: ast.AST) -> bool:
    """`actor=...`, `actor: str = ...` or `SOME_ACTOR = ...`."""
    if isinstance(node, ast.keyword):
        return node.arg == "actor"
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.target.id == "actor"
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id.endswith("_ACTOR") for t in node.targets)
    return False


def _recorded_actors() -> set[str]:
    """Every actor name fleetctl's code records that a subject could spell: `actor="x"` and
    `actor: str = "x"` in fleetctl/ and workflows/, and an f-string's text before its first
    '@' (`prolog@{job}`); names holding ':' or '/' are refused as names already."""
    found: set[str] = set()
    for path in [*(REPO / "fleetctl").rglob("*.py"), *(REPO / "workflows").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not _names_an_actor(node):
                continue
            value = node.value  # type: ignore[attr-defined]
            if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value:
                found.add(value.value)
            elif isinstance(value, ast.JoinedStr) and value.values and isinstance(value.values[0], ast.Constant):
                head = str(value.values[0].value)
                if "@" in head:
                    found.add(head.split("@", 1)[0] + "@x")
    return {actor for actor in found if ":" not in actor and "/" not in actor}


def test_every_actor_automation_records_is_refused_as_a_subject() -> None:
    actors = _recorded_actors()
    assert {"lifecycle", "reachability", "fleetctl-agent@x", "job-sync"} <= actors, actors
    for actor in sorted(actors):
        with pytest.raises(RolesError) as refused:
            parse_roles(f"subjects: {{{actor}: viewer}}")
        assert "is an automation actor's name" in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("subject", ["lifecycle", "Lifecycle", "prolog@node1", "epilog@4242", "fleetctl-agent@n7"])
def test_a_subject_named_as_automation_is_refused_in_one_line(subject: str) -> None:
    with pytest.raises(RolesError) as refused:
        parse_roles(f"subjects:\n  alice: viewer\n  {subject}: operator\n")
    assert str(refused.value) == (
        f"roles: subjects: {subject!r} is an automation actor's name: no person may be recorded as it"
    )


def test_a_name_that_only_resembles_automation_is_a_subject() -> None:
    roles = parse_roles("subjects: {lifecycle-team: viewer, olga@prolog.example: operator}")
    assert roles.role_of("olga@prolog.example", "default") == Role.OPERATOR
