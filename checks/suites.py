"""Check suites as data: named, ordered lists of catalog checks (checks/suites/*.yaml).

An operator can override or add suites with a directory of YAML files of the same shape
(the `suites_dir` setting); a suite there replaces the shipped one of the same name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fleetctl.checks.catalog import CHECKS
from fleetctl.checks.safe_yaml import YamlRefused, load_file

SHIPPED_DIR = Path(__file__).parent / "suites"


class SuiteError(ValueError):
    pass


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    checks: tuple[str, ...]


def _load(path: Path) -> Suite:
    try:
        doc = load_file(path)
    except YamlRefused as exc:
        raise SuiteError(str(exc)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("checks"), list) or not doc["checks"]:
        raise SuiteError(f"{path}: expected 'name' and a non-empty 'checks' list")
    if not all(isinstance(c, str) for c in doc["checks"]):
        raise SuiteError(f"{path}: each check must be a check name")
    unknown = [c for c in doc["checks"] if c not in CHECKS]
    if unknown:
        raise SuiteError(f"{path}: unknown check {unknown[0]!r} (known: {', '.join(sorted(CHECKS))})")
    return Suite(str(doc.get("name") or path.stem), str(doc.get("description", "")), tuple(doc["checks"]))


def load_suites(override_dir: str | Path | None = None) -> dict[str, Suite]:
    suites = {s.name: s for s in map(_load, sorted(SHIPPED_DIR.glob("*.yaml")))}
    if override_dir:
        directory = Path(override_dir).expanduser()
        if not directory.is_dir():
            raise SuiteError(f"suites directory {directory} does not exist")
        suites.update({s.name: s for s in map(_load, sorted(directory.glob("*.yaml")))})
    return suites


def load_suite(name: str, override_dir: str | Path | None = None) -> Suite:
    suites = load_suites(override_dir)
    if name not in suites:
        raise SuiteError(f"unknown suite {name!r} (known: {', '.join(sorted(suites))})")
    return suites[name]
