"""The agent's loop with a log file rotated under it and a stand-in nvidia-smi: each fault
is spooled and delivered once, a sampled finding on its change only; and the CLI refuses
bad options in one line."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from fleetctl.agent.follow import FileSource
from fleetctl.agent.runner import Agent, AgentConfig
from fleetctl.agent.transport import SendFailed
from fleetctl.text import MAX_TEXT, bounded
from tests.conftest import FIXTURES

XID = "2026-11-30T20:00:0{}+00:00 host kernel: NVRM: Xid (PCI:0000:2b:00): {}, pid=1, name=x, n\n"
NVSMI = FIXTURES / "checks" / "nvidia_smi"


class Recorder:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self.down = False

    async def send(self, node, events):
        if self.down:
            raise SendFailed("down")
        self.events += events


def fake_nvidia_smi(tmp_path, fixture: str):
    """A stand-in nvidia-smi that prints the fixture named in a file the test rewrites."""
    choice = tmp_path / "which"
    choice.write_text(str(NVSMI / fixture))
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write(open(open({str(choice)!r}).read()).read())\n")
    script.chmod(0o755)
    return script, choice


async def test_a_rotated_log_and_a_changing_sample_are_each_sent_once(tmp_path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(XID.format(1, 13))
    script, choice = fake_nvidia_smi(tmp_path, "csv_8xh100_ok.txt")
    recorder = Recorder()
    agent = Agent(
        AgentConfig(
            node="n1", spool_dir=tmp_path / "spool", sample_argv=(str(script),), profile="h100-sxm", boot_id="b"
        ),
        FileSource(log),
        recorder,
    )
    agent.read_once()
    await agent.sample_once()
    with open(log, "a") as f:
        f.write(XID.format(2, 31))
    os.rename(log, tmp_path / "kern.log.1")
    log.write_text(XID.format(3, 79))
    choice.write_text(str(NVSMI / "csv_8xh100_remap_failure_fail.txt"))
    agent.read_once()
    await agent.sample_once()
    await agent.sample_once()  # the same finding again: nothing new
    await agent.deliver()
    codes = [e["code"] for e in recorder.events]
    # The critical 79 first (and again in order, with the same id), then the spool's order.
    assert codes[:4] == [79, 13, 31, 79] and all(c is None for c in codes[4:]) and len(codes) > 4
    assert (
        all(e["source"] == "agent" for e in recorder.events)
        and len({e["event_id"] for e in recorder.events}) == len(codes) - 1
    )
    assert recorder.events[0]["at"] == pytest.approx(1796068803.0)  # 20:00:03 UTC, the line's own time
    assert agent.spool.depth == 0 and agent.metrics.samples._value.get() == 3


async def test_dcgm_health_is_sampled_beside_nvidia_smi_and_its_failure_drains(tmp_path) -> None:
    """A stand-in dcgmi printing the health report: its GPU 1 memory failure is a critical
    event (drains the node, no Xid needed), its warnings are warnings, each sent once."""
    nvsmi, _ = fake_nvidia_smi(tmp_path / "", "csv_8xh100_ok.txt")
    dcgmi = tmp_path / "dcgmi"
    report = FIXTURES / "checks" / "dcgm_health" / "gpu1_memory_fail_sm_warn.txt"
    dcgmi.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write(open({str(report)!r}).read())\n")
    dcgmi.chmod(0o755)
    (tmp_path / "kern.log").write_text("")
    recorder = Recorder()
    agent = Agent(
        AgentConfig(
            node="n1",
            spool_dir=tmp_path / "spool",
            sample_argv=(str(nvsmi),),
            profile="h100-sxm",
            dcgm_health_argv=(str(dcgmi), "health", "-c"),
            boot_id="b",
        ),
        FileSource(tmp_path / "kern.log"),
        recorder,
    )
    await agent.sample_once()
    await agent.sample_once()  # unchanged: nothing new
    await agent.deliver()
    sent = sorted((e["severity"], e["message"].split(":")[0]) for e in recorder.events)
    assert sent == [
        ("critical", "dcgm-health GPU 1"),
        ("warning", "dcgm-health GPU 0"),
        ("warning", "dcgm-health GPU 1"),
    ]
    assert all(e["code"] is None for e in recorder.events)


async def test_delivery_backs_off_while_temporal_is_down_and_resumes(tmp_path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(XID.format(1, 13))
    recorder = Recorder()
    recorder.down = True
    agent = Agent(AgentConfig(node="n1", spool_dir=tmp_path / "spool"), FileSource(log), recorder)
    agent.read_once()
    await agent.deliver()
    await agent.deliver()  # inside the back-off: not tried again
    assert agent.metrics.send_failures._value.get() == 1 and agent.spool.depth == 1
    recorder.down = False
    agent._retry_at = 0.0  # the back-off has passed
    await agent.deliver()
    assert [e["code"] for e in recorder.events] == [13] and agent.spool.depth == 0


@pytest.mark.parametrize(
    "args, words",
    [
        (["--max-spool", "0"], "--max-spool"),
        (["--sample-interval", "0.2"], "--sample-interval"),
        (["--kmsg", "/dev/null", "--journal"], "at most one"),
        (["--profile", "no-such-gpu"], "no-such-gpu"),
        (["--kmsg", "/nonexistent/kmsg"], "cannot open the kernel log"),
        (["--heartbeat-interval", "0"], "--heartbeat-interval"),
        (["--heartbeat-url", "http://intake:9411"], "intake's token"),  # no token anywhere
        (["--heartbeat-url", "https://intake:9411", "--heartbeat-token-file", os.devnull], "bearer token is empty"),
        (
            ["--heartbeat-url", "http://intake:9411", "--heartbeat-token-file", "/nonexistent/token"],
            "--heartbeat-token-file",
        ),
        (
            ["--heartbeat-url", "intake:9411", "--heartbeat-token-file", str(FIXTURES / "agent" / "heartbeat-token")],
            "not an http:// or https:// URL",
        ),
        (
            [
                "--heartbeat-url",
                "ftp://intake:21",
                "--heartbeat-token-file",
                str(FIXTURES / "agent" / "heartbeat-token"),
            ],
            "not an http:// or https:// URL",
        ),
        (
            [
                "--heartbeat-url",
                "http://intake:9411",
                "--heartbeat-token-file",
                str(FIXTURES / "agent" / "heartbeat-token"),
            ],
            "sent only over https",
        ),  # the credential would cross the network in clear
        (["--events-to-intake"], "--heartbeat-url"),
    ],
)
def test_bad_agent_options_get_one_line_and_exit_2(tmp_path, args, words) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("FLEETCTL_INTAKE_TOKEN", "FLEETCTL_AGENT_HEARTBEAT_URL")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fleetctl.cli.main",
            "agent",
            "n1",
            "--spool",
            str(tmp_path / "s"),
            "--metrics-port",
            "0",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "FLEETCTL_CONFIG": os.devnull},
    )
    assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


async def test_a_critical_line_after_a_flood_of_minor_ones_is_sent_first(tmp_path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("".join(XID.format(1, 13) for _ in range(450)) + XID.format(2, 79))
    recorder = Recorder()
    agent = Agent(AgentConfig(node="n1", spool_dir=tmp_path / "spool", batch_size=200), FileSource(log), recorder)
    agent.read_once()
    sends = []

    async def send(node, events):
        sends.append([e["code"] for e in events])
        await Recorder.send(recorder, node, events)

    recorder.send = send
    await agent.deliver()
    # Each batch of 200 spooled events goes as one Xid 13 with its count (and the 79 again,
    # with its one id, when the spool's order reaches it).
    assert sends == [[79], [13], [13], [13, 79]]
    assert sum(e.get("repeat_count", 1) for e in recorder.events if e["code"] == 13) == 450
    assert agent.metrics.sent._value.get() == 451 and agent.spool.depth == 0


def _dcgm_report_with_rows(rows: list[bytes]) -> bytes:
    """The GPU 0 memory warning report, its message continued by `rows` (each a 54-character
    message cell, as dcgmi prints a long message)."""
    lines = (FIXTURES / "checks" / "dcgm_health" / "gpu0_memory_warn.txt").read_bytes().splitlines(keepends=True)
    border = max(i for i, line in enumerate(lines) if line.startswith(b"+-"))  # the closing one
    cells = [b"|" + b" " * 27 + b"| " + row.ljust(57) + b"|\n" for row in rows]
    return b"".join(lines[:border] + cells + lines[border:])


@pytest.mark.parametrize(
    ("rows", "kept"),
    [
        # 100 more rows: a 5.8 KB message, past the bound every event's text keeps.
        ([b"w" * 54] * 100, lambda message: message.endswith("…")),
        # A NUL (what PostgreSQL's text refuses) and a byte that is not UTF-8.
        (
            [b"a NUL \x00 and a byte \xff that is not UTF-8"],
            lambda message: "\x00" not in message and "\ufffd" in message,
        ),
    ],
    ids=["oversized", "unencodable"],
)
async def test_a_sampled_finding_is_sent_bounded_and_encodable(tmp_path, rows, kept) -> None:
    """The sampler's findings carry the tool's own words (a DCGM incident's message); the
    event they become is bounded like a kernel log fault's, so no tool output can make the
    spool, the intake or the database refuse it."""
    report = tmp_path / "report.bin"
    report.write_bytes(_dcgm_report_with_rows(rows))
    nvsmi, _ = fake_nvidia_smi(tmp_path, "csv_8xh100_ok.txt")
    dcgmi = tmp_path / "dcgmi"
    dcgmi.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.buffer.write(open({str(report)!r}, 'rb').read())\n")
    dcgmi.chmod(0o755)
    (tmp_path / "kern.log").write_text("")
    recorder = Recorder()
    agent = Agent(
        AgentConfig(
            node="n1",
            spool_dir=tmp_path / "spool",
            sample_argv=(str(nvsmi),),
            profile="h100-sxm",
            dcgm_health_argv=(str(dcgmi), "health", "-c"),
            boot_id="b",
        ),
        FileSource(tmp_path / "kern.log"),
        recorder,
    )
    await agent.sample_once()
    await agent.deliver()
    (sent,) = recorder.events
    message = sent["message"]
    assert sent["severity"] == "warning" and message.startswith("dcgm-health GPU 0: Memory system: The car is red?")
    assert len(message) <= MAX_TEXT and bounded(message) == message and kept(message), message[-200:]
    message.encode()  # a lone surrogate would raise here
    assert agent.spool.depth == 0 and agent.metrics.detected._value.get() == 1


@pytest.mark.parametrize(("loaded_ago_s", "reported"), [(10.0, 0), (3600.0, 1)])
async def test_a_driver_load_in_the_log_starts_the_grace_of_sampled_findings(tmp_path, loaded_ago_s, reported) -> None:
    """The kernel's line for the driver's load restarts the GPUs' grace: a GPU missing from
    every sample within 2 minutes of it is no event yet (the driver is still bringing the
    GPUs up), and the agent samples again when the grace ends; one loaded an hour ago is."""
    from datetime import UTC, datetime

    from fleetctl.agent.sampler import Confirmation

    loaded = datetime.fromtimestamp(time.time() - loaded_ago_s, UTC).isoformat(timespec="seconds")
    log = tmp_path / "kern.log"
    log.write_text(f"{loaded} host kernel: NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  550.90.07\n")
    script, _ = fake_nvidia_smi(tmp_path, "csv_7xh100_missing_gpu_fail.txt")
    grace = Confirmation(samples=2, grace_s=120.0)
    config = AgentConfig(
        node="n1", spool_dir=tmp_path / "spool", sample_argv=(str(script),), profile="h100-sxm", confirmation=grace
    )
    agent = Agent(config, FileSource(log), Recorder())
    agent.read_once()
    for _ in range(3):
        agent._sample_at = time.monotonic() + 3600  # as the loop sets it before a sample
        await agent.sample_once()
    assert agent.metrics.detected._value.get() == reported
    if not reported:  # sampled again at the grace's end, not an hour later
        assert agent._sample_at - time.monotonic() <= grace.grace_s - loaded_ago_s + 1
