"""A DCGM exporter for N nodes, for the production straggler tests: each node's /metrics is
an edited copy of a real dcgm-exporter's output (tests/fixtures/dcgm/h100-node.metrics),
its Hostname label the node's name, chosen series scaled on one GPU (a GPU held at lower
clocks, a link at half rate) or left out (the field not collected)."""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from fleetctl.jobs.stragglers import TELEMETRY

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm" / "h100-node.metrics"
_SAMPLE = re.compile(r"^(?P<name>\w+)\{(?P<labels>.*)\} (?P<value>\S+)$")
DEGRADED_GPU = "0"  # the GPU a degradation is applied to: one slow GPU slows its whole node

Degrade = Mapping[str, Mapping[str, float]]  # {node: {series: factor}}
Missing = Mapping[str, "Collection[str] | str"]  # {node: series left out}


def _names(missing: Collection[str] | str) -> set[str]:
    return {missing} if isinstance(missing, str) else set(missing)


def exposition(
    node: str,
    factors: Mapping[str, float] | None = None,
    missing: Collection[str] | str = (),
    every_gpu: Mapping[str, float] | None = None,
) -> str:
    """The fixture as `node`'s exporter would serve it: `factors` scale one GPU's series,
    `every_gpu` every GPU's (a node whose GPUs all went idle)."""
    factors, left_out, every_gpu = factors or {}, _names(missing), every_gpu or {}
    lines = []
    for line in FIXTURE.read_text().splitlines():
        if line.startswith(("# HELP", "# TYPE")):
            if line.split()[2] not in left_out:
                lines.append(line)
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue  # the fixture's own header
        name, labels, value = match["name"], match["labels"], float(match["value"])
        if name in left_out:
            continue
        labels = re.sub(r'Hostname="[^"]*"', f'Hostname="{node}"', labels)
        if name in factors and f'gpu="{DEGRADED_GPU}"' in labels:
            value = round(value * factors[name], 3)
        if name in every_gpu:
            value = round(value * every_gpu[name], 3)
        lines.append(f"{name}{{{labels}}} {value:g}" if value < 1e15 else f"{name}{{{labels}}} {value}")
    return "\n".join(lines) + "\n"


def node_telemetry(nodes, degrade: Degrade, missing: Missing) -> dict[str, dict[str, float]]:
    """{metric: {node: its slowest GPU's value}} of the gauges, as Prometheus' aggregation
    over a window of identical samples gives them (the pure tests' input)."""
    telemetry: dict[str, dict[str, float]] = {t.name: {} for t in TELEMETRY if not t.slowdown_bits}
    for node in nodes:
        text = exposition(node, degrade.get(node), missing.get(node, ()))
        for family in text_string_to_metric_families(text):
            spec = next((t for t in TELEMETRY if family.name in t.series and not t.slowdown_bits), None)
            if spec is None:
                continue
            values = [s.value for s in family.samples]
            telemetry[spec.name][node] = min(values) if spec.higher_is_better else max(values)
    return telemetry


class DcgmExporters:
    """One exporter per node on 127.0.0.1, each serving its node's /metrics; `degrade`,
    `every_gpu` and `missing` may be changed while they run (the next scrape sees it)."""

    def __init__(self, nodes) -> None:
        self.degrade: dict[str, dict[str, float]] = {}
        self.every_gpu: dict[str, dict[str, float]] = {}
        self.missing: dict[str, set[str]] = {}
        self.servers: dict[str, ThreadingHTTPServer] = {}
        for node in nodes:
            self.servers[node] = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(node))
            threading.Thread(target=self.servers[node].serve_forever, daemon=True, name=f"dcgm-{node}").start()

    @property
    def targets(self) -> list[str]:
        return [f"127.0.0.1:{server.server_port}" for server in self.servers.values()]

    def _handler(self, node: str):
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = exposition(
                    node, owner.degrade.get(node), owner.missing.get(node, ()), owner.every_gpu.get(node)
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        return Handler

    def close(self) -> None:
        for server in self.servers.values():
            server.shutdown()
            server.server_close()
