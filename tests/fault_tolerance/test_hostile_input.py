"""Hostile input: YAML bombs and renames, unchecked settings, template
bombs, a webhook that redirects, escape sequences on the terminal, self-declared identities.
Each test fails without its protection (each was broken once and watched failing)."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from fleetctl.checks.safe_yaml import YamlRefused, loads, read_text
from fleetctl.cli.main import app
from fleetctl.config import ConfigError, load_settings
from fleetctl.connections.webhook_client import post_webhook
from fleetctl.inventory.parse import InventoryError, parse_inventory
from fleetctl.remediation.rma import md_code_block, md_inline
from fleetctl.remediation.runbooks import parse_runbook
from fleetctl.remediation.sandbox import RunbookError, TemplateRefused, evaluate, render
from fleetctl.text import printable

# ---- YAML -----------------------------------------------------------------------------------

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(8)
)


def test_alias_bomb_is_refused_quickly_in_one_line() -> None:
    started = time.monotonic()
    with pytest.raises(InventoryError) as err:
        parse_inventory("nodes: []\n" + BOMB, "inv.yaml")
    assert "aliases are not allowed" in str(err.value) and len(str(err.value)) < 200
    assert time.monotonic() - started < 5  # the bomb expands to 9**9 strings when aliases are followed
    with pytest.raises(RunbookError, match="aliases are not allowed"):
        parse_runbook(BOMB, "rb.yaml")


def test_yaml_size_depth_and_binary_are_refused(tmp_path) -> None:
    with pytest.raises(YamlRefused, match="nested deeper"):
        loads("[" * 200 + "]" * 200)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe")
    with pytest.raises(YamlRefused, match="not UTF-8 text"):
        read_text(binary)
    with pytest.raises(YamlRefused, match="cannot read"):
        read_text(tmp_path)
    big = tmp_path / "big.yaml"
    big.write_text("x" * 2000)
    with pytest.raises(YamlRefused, match="larger than 1000 bytes"):
        read_text(big, max_bytes=1000)


def test_yaml_1_1_renames_are_gone() -> None:
    specs = parse_inventory("nodes:\n  - {name: 0123, address: 10.0.0.1, profile: h100-sxm, rack: 0x1F}\n", "inv.yaml")
    assert (specs[0].name, specs[0].rack) == ("0123", "0x1F")
    assert loads("a: yes\nb: true\nc: 12\nd: 1.5\ne: ~") == {"a": "yes", "b": True, "c": 12, "d": 1.5, "e": None}


@pytest.mark.parametrize(
    "nodes, message",
    [
        (
            "[{name: gpu-001, address: a, profile: h100-sxm}, {name: GPU-001, address: b, profile: h100-sxm}]",
            "duplicate name",
        ),
        ("[{name: GPU_1, address: a, profile: h100-sxm, scheduler: kubernetes}]", "Kubernetes node names"),
        ("[{name: n1, address: a, profile: h100-sxm, bmc: 'http://10.1.0.1'}]", "plain http"),
    ],
)
def test_inventory_refuses_names_and_bmcs(nodes: str, message: str) -> None:
    with pytest.raises(InventoryError, match=message):
        parse_inventory(f"nodes: {nodes}\n", "inv.yaml")


def test_http_bmc_is_accepted_when_allowed() -> None:
    text = "nodes: [{name: n1, address: a, profile: h100-sxm, bmc: 'http://10.1.0.1'}]\n"
    assert parse_inventory(text, "inv.yaml", allow_http_bmc=True)[0].bmc == "http://10.1.0.1"


# ---- settings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "var, value",
    [
        ("FLEETCTL_GUARD_MAX_UNAVAILABLE_FLEET", "nan"),
        ("FLEETCTL_GUARD_MAX_UNAVAILABLE_FLEET", "0"),
        ("FLEETCTL_GUARD_MAX_UNAVAILABLE_RACK", "1.5"),
        ("FLEETCTL_GUARD_STORM_FRACTION", "inf"),
        ("FLEETCTL_GUARD_STORM_WINDOW_S", "-600"),
        ("FLEETCTL_BMC_VERIFY_TLS", "enabled"),
        ("FLEETCTL_BMC_VERIFY_TLS", "TRUE "),
        ("FLEETCTL_REMEDIATION_SHADOW", "required"),
        ("FLEETCTL_LEMON_THRESHOLD", "2.5"),
    ],
)
def test_bad_settings_are_one_line_and_exit_2(var: str, value: str) -> None:
    with pytest.raises(ConfigError):
        load_settings(env={var: value}, config_file=os.devnull)
    result = CliRunner().invoke(app, ["fleet", "status"], env={var: value, "FLEETCTL_CONFIG": os.devnull})
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: setting "), result.stderr


def test_booleans_parse_strictly_both_ways() -> None:
    for raw, expected in (("1", True), ("On", True), ("no", False), ("FALSE", False)):
        assert load_settings(env={"FLEETCTL_BMC_VERIFY_TLS": raw}, config_file=os.devnull).bmc_verify_tls is expected


def test_config_file_list_for_a_string_is_refused(tmp_path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("fleet: [a, b]\n")
    with pytest.raises(ConfigError, match="expected a string, not list"):
        load_settings(env={}, config_file=config)


@pytest.mark.parametrize("operator", ["runbook:xid-79@worker-3", "schedule/nightly", "eve\x1b]0;pwned\x07", "x" * 300])
def test_operator_cannot_pose_as_automation_or_carry_control_characters(operator: str) -> None:
    with pytest.raises(ConfigError, match="operator"):
        load_settings(flags={"operator": operator}, env={}, config_file=os.devnull)


def test_default_operator_is_the_os_account_not_the_environment() -> None:
    import pwd

    settings = load_settings(env={}, config_file=os.devnull)
    os.environ["USER"], saved = "mallory", os.environ.get("USER")
    try:
        assert settings.identity().split("@")[0] == pwd.getpwuid(os.getuid()).pw_name
    finally:
        os.environ.pop("USER") if saved is None else os.environ.__setitem__("USER", saved)


# ---- runbook templates ----------------------------------------------------------------------

BOMBS = [
    "{{ ('x'*10000)*10000 }}",
    "{{ 'x'|center(300000000) }}",
    "{{ '%300000000s'%'x' }}",
    "{{ event.message|center(width=300000000) }}",
    "{{ event.message.ljust(300000000) }}",
    "{{ '{:300000000}'.format('x') }}",
    "{{ (['ab'*30000]*100)|join }}",
    "{{ ['a'*60000]*60000 }}",
    "{{ 'x'|replace('x', 'y'*1000)|replace('y', 'z'*1000) }}",
    "{% for a in [1] %}{% for b in [1] %}{% endfor %}{% endfor %}",
    "{{ (('x'*10000)*10000)|length }}",
]  # never printed: only the repeat bound stops it


@pytest.mark.parametrize("template", BOMBS)
def test_template_bombs_fail_validation(template: str) -> None:
    text = f"name: x\nmatch: {{xid: [1]}}\nsteps:\n  - action: notify\n    with: {{message: {json.dumps(template)}}}\n"
    started = time.monotonic()
    with pytest.raises(TemplateRefused) as err:
        parse_runbook(text, "bomb.yaml")
    assert len(str(err.value)) < 400 and time.monotonic() - started < 5


@pytest.mark.parametrize(
    "template, why",
    [
        ("{{ 'x' * (event.code * 1000) }}", "repeating a sequence"),
        ("{{ event.message * event.code }}", "repeating a sequence"),
        # Refused before the 100 MB are built, not after.
        ("{{ (event.message|center(event.code * 1000))|length }}", "center width"),
        ("{{ 'x'*60000 }}{{ event.message*60 }}", "rendered value is longer"),  # each part is small enough
        ("{% for x in ['a'*60000]*60000 %}{{ '' if (x ~ 'b') == 'c' else '' }}{% endfor %}", "more than .* in all"),
    ],
)
def test_data_dependent_bombs_are_refused_at_render(template: str, why: str) -> None:
    with pytest.raises(TemplateRefused, match=f"refused by the sandbox: .*{why}"):
        render(template, {"event": {"code": 100000, "message": "x" * 1000}})


def test_every_render_and_evaluation_error_is_template_refused() -> None:
    with pytest.raises(TemplateRefused, match="ZeroDivisionError"):
        render("{{ 8 // (event.message|int) }}", {"event": {"message": "zero"}})
    with pytest.raises(TemplateRefused, match="ZeroDivisionError"):
        evaluate("8 // (event.message|int) > 1", {"event": {"message": "0"}})
    assert render("{{ 8 // (event.message|int) }}", {"event": {"message": "2"}}) == "4"


# ---- the webhook ----------------------------------------------------------------------------


class _Hook(ThreadingHTTPServer):
    """Answers every POST with `answer(path)` (status, extra headers); records what it got."""

    def __init__(self, answer) -> None:
        self.got: list[tuple[str, str | None]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                hook.got.append((self.path, self.headers.get("Authorization")))
                status, headers = answer(self.path)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


def test_webhook_refuses_redirects_and_keeps_the_token() -> None:
    thief = _Hook(lambda path: (200, {}))
    hook = _Hook(lambda path: (302, {"Location": thief.url("/steal")}))
    try:
        status = post_webhook(hook.url("/hook"), "SECRET-T", {"kind": "rma"}, timeout_s=5)
    finally:
        hook.shutdown()
        thief.shutdown()
    assert status == "refused: HTTP 302 (redirects are not followed)"
    assert hook.got == [("/hook", "Bearer SECRET-T")] and thief.got == []


def test_webhook_token_needs_https_off_this_machine() -> None:
    status = post_webhook("http://hooks.example.invalid/x", "SECRET-T", {}, timeout_s=2)
    assert status == "failed: the webhook token is only sent over https (or to this machine)"


# ---- what reaches the operator's terminal ---------------------------------------------------

HOSTILE = (
    "GPU fell \x1b]0;pwned\x07\x1b[2J\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\ [link=http://evil]x[/link] \u202e"
)


def test_printable_escapes_every_control_sequence() -> None:
    shown = printable(HOSTILE)
    assert not any(c in shown for c in "\x1b\x07\u202e")
    assert "\\x1b]0;pwned\\x07" in shown and "\\u202e" in shown
    assert printable("a\nb\tc") == "a\nb\tc" and printable("a\nb", keep_newlines=False) == "a\\x0ab"


def test_tables_show_recorded_text_escaped(capsys) -> None:
    from rich.console import Console

    from fleetctl.cli.output import simple_table

    console = Console(force_terminal=True, width=400)
    with console.capture() as captured:
        console.print(simple_table(HOSTILE, ["cause"], [[HOSTILE]]))
    out = captured.get()
    assert "\x1b]" not in out and "\x07" not in out and "\u202e" not in out
    assert "[link=http://evil]" in out  # shown as text, not turned into a rich link


def test_rma_markdown_cannot_break_out() -> None:
    block = md_code_block("ok\n```\n# injected heading\n````\n")
    fence = block.splitlines()[0]
    assert fence == "`````" and block.endswith("\n" + fence) and block.count(fence) == 2
    assert md_inline("a | b\nc") == "a \\| b c"
    assert "\x1b" not in md_inline(HOSTILE) and "\x1b" not in md_code_block(HOSTILE)


# ---- the CLI edge ---------------------------------------------------------------------------


def test_huge_xid_is_refused_at_the_cli(tmp_path) -> None:
    result = CliRunner().invoke(
        app,
        ["--db-url", f"sqlite:///{tmp_path}/fleet.db", "node", "event", "gpu-1", "--xid", "99999999999999999999"],
        env={"FLEETCTL_CONFIG": os.devnull},
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == ["error: --xid must be a positive XID code (at most 65535)"]


def test_huge_xid_in_a_kernel_log_is_refused_at_the_cli(tmp_path) -> None:
    log = tmp_path / "dmesg.txt"
    log.write_text("[ 12.3] NVRM: Xid (PCI:0000:18:00): 99999999999999999999, pid=1, Channel 00000001\n")
    result = CliRunner().invoke(
        app,
        ["--db-url", f"sqlite:///{tmp_path}/fleet.db", "node", "event", "gpu-1", "--from-log", str(log)],
        env={"FLEETCTL_CONFIG": os.devnull},
    )
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {log}: ") and "internal" not in line


@pytest.mark.parametrize("kind", ["binary", "directory"])
def test_binary_or_directory_input_is_a_usage_error(tmp_path, kind: str) -> None:
    target = tmp_path / "input"
    if kind == "binary":
        target.write_bytes(b"\x7fELF\x00\xff\xfe\x00")
    else:
        target.mkdir()
    for args in (["node", "import", str(target)], ["runbook", "validate", str(target)]):
        result = CliRunner().invoke(
            app, ["--db-url", f"sqlite:///{tmp_path}/fleet.db", *args], env={"FLEETCTL_CONFIG": os.devnull}
        )
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "internal" not in lines[0], result.stderr


def test_sqlite_database_is_private(tmp_path) -> None:
    from fleetctl.db.engine import get_engine

    db = tmp_path / "new-dir" / "fleet.db"
    get_engine(f"sqlite:///{db}")
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700


def test_config_masks_credentials_in_urls() -> None:
    url = "https://bot:hunter2@hooks.example/x?token=q-7f3a"
    result = CliRunner().invoke(
        app, ["config", "-o", "json"], env={"FLEETCTL_CONFIG": os.devnull, "FLEETCTL_WEBHOOK_URL": url}
    )
    assert result.exit_code == 0, result.output
    shown = {row["setting"]: row["value"] for row in json.loads(result.stdout)}
    assert "hunter2" not in result.stdout and "q-7f3a" not in result.stdout
    assert shown["webhook_url"].startswith("https://bot:***@hooks.example/x?token=***")


@pytest.mark.parametrize(
    "args, message",
    [
        (["rma", "show", "99999999999999999999"], "ID must be between 1 and 9223372036854775807"),
        (["metrics", "serve", "--port", "99999"], "--port must be between 0 and 65535"),
        (["fleet", "status", "--interval", "nan"], "--interval must be between 0.1 and 3600"),
        (["runbook", "run", "xid-79-fallen-off-bus", "--node", "n1", "--xid", "99999999999999999999"], "--xid must be"),
    ],
)
def test_numeric_options_are_bounded_at_the_edge(tmp_path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(
        app, ["--db-url", f"sqlite:///{tmp_path}/fleet.db", *args], env={"FLEETCTL_CONFIG": os.devnull}
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["node", "event", "gpu-1", "--xid", "abc"], 2, "Invalid value for '--xid': a whole number is needed"),
        (["node", "show", "gpu-[1-"], 2, "malformed host list: host list 'gpu-[1-': '[' without ']'"),
        (["node", "show", "gpu-[1-3]"], 2, "gpu-[1-3] names 3 nodes; this command takes one"),
        (["node", "history", "gpu-[1-"], 2, "malformed host list"),
        (["report", "--html", "/missing/dir/r.html"], 1, "/missing/dir/r.html: No such file or directory"),
    ],
)
def test_errors_are_said_in_an_operators_words(tmp_path, args: list[str], code: int, message: str) -> None:
    """No pydantic phrasing, no exception class: what is wrong with what was typed."""
    url = f"sqlite:///{tmp_path}/fleet.db"
    assert (
        CliRunner().invoke(app, ["--db-url", url, "db", "upgrade"], env={"FLEETCTL_CONFIG": os.devnull}).exit_code == 0
    )
    result = CliRunner().invoke(app, ["--db-url", url, *args], env={"FLEETCTL_CONFIG": os.devnull})
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Input should be" not in lines[0] and "Error:" not in lines[0], lines[0]


def test_redfish_client_refuses_plain_http_off_this_machine() -> None:
    from fleetctl.bmc.redfish import RedfishClient

    with pytest.raises(ValueError, match="must use https"):
        RedfishClient("http://10.1.0.1", "admin", "pw")
    assert RedfishClient("http://10.1.0.1", "admin", "pw", allow_http=True).base_url == "http://10.1.0.1"
    assert RedfishClient("http://127.0.0.1:8000", "admin", "pw").base_url == "http://127.0.0.1:8000"


def test_metrics_serve_listens_on_this_machine_by_default(tmp_path) -> None:
    import subprocess
    import sys

    from fleetctl.connections.temporal_server import free_port

    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetctl.cli.main",
            "--db-url",
            f"sqlite:///{tmp_path}/fleet.db",
            "metrics",
            "serve",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "FLEETCTL_CONFIG": os.devnull},
    )
    try:
        line = proc.stderr.readline()  # printed once the socket is bound; '' if the process died
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    assert line.strip() == f"serving Prometheus metrics on http://127.0.0.1:{port}/metrics"
