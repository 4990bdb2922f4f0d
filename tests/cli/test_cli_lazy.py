"""The CLI loads a noun's module only when that noun runs, and lists every noun with the
one-line help of its own module."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from fleetctl.cli.main import NOUNS, FleetctlGroup, load_noun

# Modules only a noun's own layer may bring in: `fleetctl --help` imports none of them.
LAYERS = (
    "fleetctl.cli.node",
    "fleetctl.cli.fleet",
    "fleetctl.db",
    "fleetctl.workflows",
    "temporalio",
    "sqlalchemy",
    "fleetctl.schedulers",
    "fleetctl.executors",
    "kubernetes",
    "paramiko",
    "jinja2",
    "yaml",
)


def _imported_after(args: list[str]) -> list[str]:
    script = textwrap.dedent(f"""
        import json, sys
        from typer.testing import CliRunner
        from fleetctl.cli.main import app
        result = CliRunner().invoke(app, {args!r})
        print(json.dumps({{"code": result.exit_code, "modules": sorted(sys.modules)}}))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "FLEETCTL_CONFIG": "/dev/null"},
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["code"] == 0
    return out["modules"]


def _loaded(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


def test_help_imports_no_noun() -> None:
    assert _loaded(_imported_after(["--help"]), LAYERS) == []


def test_a_noun_imports_its_own_module_only() -> None:
    modules = _imported_after(["sim", "--help"])
    assert "fleetctl.cli.sim" in modules
    others = {n.module for n in NOUNS.values()} - {"fleetctl.cli.sim"}
    assert _loaded(modules, tuple(others)) == []


@pytest.mark.parametrize("name", NOUNS)
def test_listed_help_is_the_modules_own(name: str) -> None:
    listed = FleetctlGroup().commands[name]
    assert listed.get_short_help_str(200) == load_noun(name).get_short_help_str(200)
