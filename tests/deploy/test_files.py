"""deploy/: the container build file, the systemd units and the compose file. Images cannot
be built or pulled here, so each file is checked for what can be checked without them:
structure, consistency with each other and with the CLI, and systemd's own verifier."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fleetctl.cli.main import app
from tests.support.services import missing_service

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"fleetctl:{VERSION}"
INSTALLED_FLEETCTL = "/opt/fleetctl/bin/fleetctl"  # where the image, the units and the docs put it


def is_a_fleetctl_command(argv: list[str]) -> bool:
    """argv (after `fleetctl`) names a real command with options it takes: `--help` after it
    succeeds (an unknown command or option fails before --help is acted on)."""
    return CliRunner().invoke(app, [*argv, "--help"]).exit_code == 0


# -- the container build file ----------------------------------------------------------


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Containerfile, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip() if " " in line.strip() else "")
        for line in joined.splitlines()
        if line.strip()
    ]


def stages(text: str) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for instruction in instructions(text):
        if instruction[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def test_the_image_is_multi_stage_non_root_and_installs_only_the_wheel():
    build, final = stages((DEPLOY / "Containerfile").read_text())[0], stages((DEPLOY / "Containerfile").read_text())[-1]
    build_name = build[0][1].split()[-1]
    assert " AS " in build[0][1].upper() and any("-m build --wheel" in args for kind, args in build if kind == "RUN")
    copies = [args for kind, args in final if kind in ("COPY", "ADD")]
    assert copies and all(
        args.startswith(f"--from={build_name} ") and args.split()[1].endswith(".whl") for args in copies
    ), copies
    assert any("pip install" in args and ".whl" in args for kind, args in final if kind == "RUN")
    users = [args for kind, args in final if kind == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    entrypoint = next(args for kind, args in final if kind == "ENTRYPOINT")
    assert "fleetctl" in entrypoint and INSTALLED_FLEETCTL.rsplit("/", 1)[0] in next(
        args for kind, args in final if kind == "ENV"
    )


def test_the_containerfile_checks_would_catch_a_source_copy_in_the_final_stage():
    text = (DEPLOY / "Containerfile").read_text() + "\nCOPY . /src\n"
    copies = [args for kind, args in stages(text)[-1] if kind == "COPY"]
    assert not all(args.startswith("--from=") for args in copies)


# -- systemd units -----------------------------------------------------------------------

UNITS = sorted(DEPLOY.glob("systemd/*.service"))


def verify(unit: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """systemd-analyze verify on a copy whose ExecStart names this venv's fleetctl (the
    verifier insists the program exists; everything else is the unit as shipped)."""
    copy = tmp_path / unit.name
    copy.write_text(unit.read_text().replace(INSTALLED_FLEETCTL, str(Path(sys.executable).parent / "fleetctl")))
    return subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(copy)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )


@pytest.fixture
def systemd_analyze():
    if not shutil.which("systemd-analyze"):
        missing_service("systemd-analyze", "not installed (Debian package systemd; make system-deps)")


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_passes_systemd_analyze_verify(unit, tmp_path, systemd_analyze):
    result = verify(unit, tmp_path)
    # verify exits 0 on many problems (an unknown key, a bad value): any diagnostic fails.
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr


def test_verify_reports_a_misspelled_key(tmp_path, systemd_analyze):
    broken = tmp_path / "src" / "fleetctl-metrics.service"
    broken.parent.mkdir()
    broken.write_text(
        (DEPLOY / "systemd/fleetctl-metrics.service").read_text().replace("ProtectSystem=", "ProtectSytem=")
    )
    assert "Unknown key" in (verify(broken, tmp_path).stderr)


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_runs_a_fleetctl_command_as_an_unprivileged_user(unit):
    fields = dict(line.split("=", 1) for line in unit.read_text().splitlines() if re.match(r"^[A-Za-z]+=", line))
    assert fields["User"] not in ("root", "0") and fields["NoNewPrivileges"] == "yes"
    program, *argv = fields["ExecStart"].split()
    assert program == INSTALLED_FLEETCTL
    assert is_a_fleetctl_command(argv), argv


def exposure(unit: Path, tmp_path: Path) -> float:
    """`systemd-analyze security` of the unit file as shipped: its overall exposure, 0-10."""
    copy = tmp_path / unit.name
    copy.write_text(unit.read_text())
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert found, result.stdout + result.stderr
    return float(found[1])


def test_the_agent_unit_is_hardened_at_least_as_the_worker(tmp_path, systemd_analyze):
    worker = exposure(DEPLOY / "systemd/fleetctl-worker@.service", tmp_path)
    agent = exposure(DEPLOY / "systemd/fleetctl-agent.service", tmp_path)
    assert agent <= worker, f"the agent's exposure {agent} is above the worker's {worker}"


def test_the_agent_unit_names_its_node_as_the_cli_does():
    # %H is the full host name (gpu-001.cluster.example), where `fleetctl agent` without a node
    # takes the name up to the first dot, as inventories name nodes; %l is that short name.
    fields = dict(
        line.split("=", 1)
        for line in (DEPLOY / "systemd/fleetctl-agent.service").read_text().splitlines()
        if re.match(r"^[A-Za-z]+=", line)
    )
    _program, noun, *argv = fields["ExecStart"].split()
    node = argv[0] if argv and not argv[0].startswith("-") else None
    assert noun == "agent" and node in (None, "%l") and "%H" not in fields["ExecStart"], fields["ExecStart"]


def test_units_cover_worker_metrics_and_agent():
    assert {unit.name for unit in UNITS} == {
        "fleetctl-worker@.service",
        "fleetctl-metrics.service",
        "fleetctl-agent.service",
        "fleetctl-api.service",
    }


# -- compose -----------------------------------------------------------------------------


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_compose_references_only_services_and_volumes_it_defines():
    doc = compose()
    services, volumes = doc["services"], set(doc["volumes"])
    for name, service in services.items():
        assert set(service.get("depends_on", {})) <= set(services), name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert source in volumes or source.startswith(("/", ".")), (name, source)


def test_compose_runs_every_fleetctl_process_from_the_one_image_built_by_the_containerfile():
    services = compose()["services"]
    fleetctl = {name: s for name, s in services.items() if s["image"].startswith("fleetctl:")}
    assert set(fleetctl) == {"migrate", "temporal-setup", "worker", "metrics"}
    assert {s["image"] for s in fleetctl.values()} == {IMAGE}
    builds = [s["build"] for s in fleetctl.values() if "build" in s]
    assert len(builds) == 1
    assert (DEPLOY / builds[0]["context"] / builds[0]["dockerfile"]).resolve() == (DEPLOY / "Containerfile").resolve()
    for name, service in fleetctl.items():
        assert is_a_fleetctl_command(service["command"]), (name, service["command"])


def test_compose_wires_temporal_on_postgresql_and_the_workers_to_both():
    services = compose()["services"]
    temporal = services["temporal"]["environment"]
    assert temporal["DB"].startswith("postgres") and temporal["POSTGRES_SEEDS"] in services
    for name in ("migrate", "temporal-setup", "worker", "metrics"):
        env = services[name]["environment"]
        db_host = re.match(r"postgresql://[^@]+@([^:/]+)", env["FLEETCTL_DB_URL"]).group(1)
        assert db_host in services and services[db_host]["image"].startswith("postgres:")
        assert env["TEMPORAL_ADDRESS"].split(":")[0] in services
    # The workers start only on a migrated database and a healthy Temporal set up for them.
    assert services["worker"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["worker"]["depends_on"]["temporal-setup"]["condition"] == "service_completed_successfully"
    assert services["worker"]["depends_on"]["temporal"]["condition"] == "service_healthy"


def test_compose_gives_temporal_the_dynamic_settings_the_dev_server_starts_with():
    from fleetctl.connections.temporal_server import CRITICAL_PATH_DYNAMIC_CONFIG

    temporal = compose()["services"]["temporal"]
    (mount,) = temporal["volumes"]
    source, target, mode = mount.split(":")
    assert mode == "ro"
    assert target == "/etc/temporal/" + temporal["environment"]["DYNAMIC_CONFIG_FILE_PATH"]
    settings = yaml.safe_load((DEPLOY / source).read_text())
    assert {key: str(values[0]["value"]) for key, values in settings.items()} == CRITICAL_PATH_DYNAMIC_CONFIG
