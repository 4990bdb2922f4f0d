"""A missing service skips on a developer's machine and fails in CI, and no test skips any
other way (tests/support/services.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.services import REQUIRE_ENV, missing_service, not_on_this_kind_of_machine

TESTS = Path(__file__).resolve().parent
HELPER = TESTS / "support" / "services.py"
SKIPS = {"skip", "skipif", "importorskip"}


def test_a_missing_service_fails_naming_it_where_services_are_required(monkeypatch) -> None:
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(
        pytest.fail.Exception, match=r"^PostgreSQL is missing and FLEETCTL_TEST_REQUIRE_SERVICES=1: no initdb"
    ):
        missing_service("PostgreSQL", "no initdb")


@pytest.mark.parametrize("value", [None, "0"])
def test_a_missing_service_skips_with_its_reason_elsewhere(monkeypatch, value) -> None:
    if value is None:
        monkeypatch.delenv(REQUIRE_ENV, raising=False)
    else:
        monkeypatch.setenv(REQUIRE_ENV, value)
    with pytest.raises(pytest.skip.Exception, match=r"^Chromium is missing: no /usr/bin/chromium"):
        missing_service("Chromium", "no /usr/bin/chromium")


@pytest.mark.parametrize("value", ["true", "yes", "2", " 1", "on"])
def test_an_unclear_setting_is_refused_not_read_as_skip(monkeypatch, value) -> None:
    monkeypatch.setenv(REQUIRE_ENV, value)
    with pytest.raises(pytest.UsageError, match=REQUIRE_ENV):
        missing_service("sshd", "not installed")


def _skips_in(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        name = node.attr if isinstance(node, ast.Attribute) else node.name if isinstance(node, ast.alias) else None
        if name in SKIPS:
            found.append(f"{path.relative_to(TESTS.parent)}:{node.lineno}: {name}")
    return found


def test_no_test_skips_except_through_missing_service() -> None:
    checked = [path for path in sorted(TESTS.rglob("*.py")) if path not in (HELPER, Path(__file__))]
    offenders = [hit for path in checked for hit in _skips_in(path)]
    assert offenders == [], (
        "skip only through tests.support.services (missing_service, not_on_this_kind_of_machine):\n"
        + "\n".join(offenders)
    )


def test_what_this_kind_of_machine_cannot_have_skips_even_where_services_are_required(monkeypatch) -> None:
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.skip.Exception, match=r"^journald cannot run on this machine: no systemd"):
        not_on_this_kind_of_machine("journald", "no systemd")
