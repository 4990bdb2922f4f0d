"""Bodies in, health events out; a body with anything wrong is refused whole (BadBody).

Alertmanager's webhook (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config):
    {"version": "4", "status": "firing", "alerts": [{"status": "firing", "labels": {...},
     "annotations": {...}, "startsAt": "...", "fingerprint": "..."}], ...}
Plain JSON: {"events": [{"node": "n1", "code": 79, "message": "...", "id": "...", "at": 1.7e9,
             "severity": "critical", "signature": "nvswitch_sxid_fatal"}]}
`signature`, optional, names the catalog signature (checks/catalog/signatures.tsv) the sender
read a fault without an Xid as; a name the catalog does not have is refused.
`gpu`, optional, is the PCI address of the GPU the fault names (0000:2b:00, as the Xid line
prints it): a code the site's policy scopes to one GPU takes that GPU out, not the node. An
address that is none is refused.

Severity (info, warning, critical) says how soon the node's workflow handles the event, and
drains the node for an event without a code when critical. Given in a plain JSON event it
must be one of the three words; an Alertmanager `severity` label is read only when it is one
of them (routes use the label for their own words, "page" or "ticket"); otherwise the Xid
catalog's severity for the code is sent, or none.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from fleetctl.agent.detect import Fault
from fleetctl.checks.result import SEVERITIES
from fleetctl.checks.signatures import MAX_SIGNATURE_NAME, signatures
from fleetctl.checks.xid_policy import CATALOG, XidPolicy
from fleetctl.nodes.gpu_quarantine import NotAGpuAddress, gpu_key
from fleetctl.nodes.health import event_severity, health_event_id
from fleetctl.text import bounded

MAX_CODE = 2**31 - 1  # the database column
MAX_REPEATS = 10**9  # a merged event stands for at most this many (a count, not a payload)
MAX_EVENTS = 1000  # a body with more is refused: a batch this large is not one incident
# Objects and arrays nested deeper than this refuse the body: Alertmanager's webhook is four
# levels deep (body, alerts, alert, labels), a plain event two or three.
MAX_DEPTH = 32
# A number longer than this (digits) is no code, time or count any sender means: it is
# read as infinite, so the field that holds it is refused by name (a 64-bit integer has 20).
MAX_DIGITS = 24
# The latest time a datetime holds (9999-12-31T23:59:59Z): a later one would fail wherever
# the event's time is read as a date.
MAX_TIME = 253_402_300_799
# Labels that name the node, in the order they are asked: DCGM exporter sets Hostname,
# kube-prometheus sets node, a scrape target has instance (host:port).
NODE_LABELS = ("node", "Hostname", "hostname", "instance")
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}\Z")  # \Z: `$` lets a trailing newline through


class BadBody(ValueError):
    pass


def loads(raw: bytes) -> object:
    """A request body as JSON, or BadBody: not UTF-8 JSON, or nested deeper than MAX_DEPTH.
    Integers past MAX_DIGITS digits are read as infinite, so the field that holds one is
    refused by name, not the body as "not JSON" (nor parsed digit by digit)."""
    try:
        body = json.loads(raw, parse_int=_int, object_pairs_hook=_unique_keys)
    except DuplicateKey as exc:
        raise BadBody(f"the body names {str(exc)[:64]!r} twice: which one a sender meant is not known") from None
    except RecursionError:
        raise BadBody(f"the body is nested deeper than {MAX_DEPTH} levels") from None
    except UnicodeDecodeError:
        raise BadBody("the body is not UTF-8 JSON") from None
    except ValueError:
        raise BadBody("the body is not JSON") from None
    if _deeper_than(body, MAX_DEPTH):
        raise BadBody(f"the body is nested deeper than {MAX_DEPTH} levels")
    return body


class DuplicateKey(ValueError):
    """An object of a body names a key twice (the key is the message)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of a body, refused when it names a key twice: json keeps the last silently,
    and two readers of one body (a proxy, the intake) could each act on another value."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKey(key)
        seen[key] = value
    return seen


def _int(digits: str) -> int | float:
    if len(digits.lstrip("-")) > MAX_DIGITS:
        return -math.inf if digits.startswith("-") else math.inf
    return int(digits)


def _deeper_than(value: object, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


@dataclass(frozen=True)
class IntakeEvent:
    node: str
    source: str
    code: int | None
    message: str
    event_id: str
    at: float
    severity: str = ""
    at_from_record: bool = False  # `at` is the alert's or the record's own time, not the receive time
    # An event sent with neither id nor time: what it says, so that a replayed POST is
    # known within a window (fleetctl.intake.server.Intake.accept); its id has the receive
    # time in it, since the same fault reported later is a new event.
    content_key: str = ""
    signature: str = ""  # a checks/catalog/signatures.tsv name, or ""
    # A sender that merged repeats of a minor event: how many it stands for, and when the
    # last was seen (the first is `at`); the delivery queue merges on from there.
    repeat_count: int = 1
    last_at: float = 0.0
    # The PCI address of the GPU the fault names (fleetctl.nodes.gpu_quarantine.gpu_key), or "".
    gpu: str = ""

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.repeat_count == 1:  # the spooled form of an event that stands for itself alone
            del out["repeat_count"], out["last_at"]
        if not self.gpu:  # as events naming no GPU were always spooled
            del out["gpu"]
        return out


def _node(value: object, where: str) -> str:
    if not isinstance(value, str) or not _NODE.match(value):
        raise BadBody(f"{where}: not a node name")
    return value


def _code(value: object, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"\d{1,10}(\.0+)?", value.strip()):
        value = int(float(value))
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CODE:
        raise BadBody(f"{where}: the code must be an integer from 0 to {MAX_CODE}")
    return value


def _text(value: object, where: str) -> str:
    """A text field, bounded (fleetctl.text.bounded: MAX_TEXT, lone surrogates replaced)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadBody(f"{where}: must be a string")
    return bounded(value)


def _strings(values: object, where: str) -> dict[str, object]:
    """An alert's labels or annotations, each name and text value bounded. A number stays a
    number (a sender may give the `xid` or `value` annotation as one); anything else is
    refused, naming the field."""
    if not isinstance(values, dict):
        raise BadBody(f"{where}: must be an object")
    out: dict[str, object] = {}
    for key, value in values.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        out[bounded(key)] = value if number else _text(value, f"{where}.{bounded(key, 64)}")
    return out


def _time(value: object, where: str) -> float:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise BadBody(f"{where}: not an RFC 3339 time") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_TIME:
        raise BadBody(f"{where}: not a time")
    return float(value)


def _severity(value: object, code: int | None, where: str, strict: bool, policy: XidPolicy, signature: str = "") -> str:
    """The site policy's severity for the code or signature, or the sender's word when graver
    (fleetctl.nodes.health.event_severity: a sender may say more, never less); "" when
    neither says. The queue orders and bounds by it, so it is decided here, on arrival."""
    said = ""
    if value is not None and value != "":
        if value in SEVERITIES:
            said = str(value)
        elif strict:
            raise BadBody(f"{where}: severity must be one of {', '.join(SEVERITIES)}")
    return event_severity(said, code, signature, policy=policy)


def _repeats(item: dict[str, object], at: float, where: str) -> tuple[int, float]:
    """How many events a merged one stands for (1 to MAX_REPEATS), and when the last was seen."""
    count = item.get("repeat_count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_REPEATS:
        raise BadBody(f"{where}.repeat_count: an integer from 1 to {MAX_REPEATS}")
    last = _time(item["last_seen"], f"{where}.last_seen") if "last_seen" in item else at
    return count, max(last, at) if count > 1 else 0.0


def _signature(value: object, where: str) -> str:
    """A catalog signature's name, or "" when none is given."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or len(value) > MAX_SIGNATURE_NAME or value not in signatures():
        raise BadBody(f"{where}: not a signature of the catalog (checks/catalog/signatures.tsv)")
    return value


def from_alertmanager(
    body: object, node_labels: tuple[str, ...] = NODE_LABELS, *, policy: XidPolicy = CATALOG
) -> list[IntakeEvent]:
    """The firing alerts of one webhook; resolved ones say nothing new about the node; each as
    severe as the site's Xid `policy` says (the catalog's where none is given).
    The code is the alert's `xid` label or annotation (or `value`, as DCGM rules template it)."""
    if not isinstance(body, dict) or body.get("version") != "4" or not isinstance(body.get("alerts"), list):
        raise BadBody("not an Alertmanager webhook (version 4 with alerts)")
    if len(body["alerts"]) > MAX_EVENTS:
        raise BadBody(f"more than {MAX_EVENTS} alerts in one body")
    out = []
    for i, alert in enumerate(body["alerts"]):
        where = f"alerts[{i}]"
        if not isinstance(alert, dict) or not isinstance(alert.get("labels"), dict):
            raise BadBody(f"{where}: no labels")
        labels = _strings(alert["labels"], f"{where}.labels")
        notes = _strings(alert.get("annotations") or {}, f"{where}.annotations")
        if alert.get("status") != "firing":
            continue
        name = next((labels[k] for k in node_labels if labels.get(k)), None)
        if name is None:
            raise BadBody(f"{where}: no node label ({', '.join(node_labels)})")
        if isinstance(name, str):
            name = name.rsplit(":", 1)[0] if re.search(r":\d+\Z", name) else name  # instance host:port
        node = _node(name, f"{where}.labels")
        raw = labels.get("xid", notes.get("xid", notes.get("value")))
        code = _code(raw, f"{where} xid")
        starts = _time(alert.get("startsAt"), f"{where}.startsAt")
        fingerprint = _text(alert.get("fingerprint"), f"{where}.fingerprint") or health_event_id(sorted(labels.items()))
        alertname = _text(labels.get("alertname"), f"{where}.labels.alertname") or "alert"
        message = _text(notes.get("summary") or notes.get("description") or alertname, where)
        out.append(
            IntakeEvent(
                node,
                "alertmanager",
                code,
                bounded(f"{alertname}: {message}"),
                health_event_id("alertmanager", fingerprint, alert.get("startsAt")),
                starts,
                _severity(labels.get("severity"), code, f"{where}.labels.severity", strict=False, policy=policy),
                True,
            )
        )
    return out


def from_json(body: object, now: float, *, policy: XidPolicy = CATALOG) -> list[IntakeEvent]:
    """The events of one /events body, each as severe as the site's Xid `policy` says."""
    items = body.get("events") if isinstance(body, dict) and "events" in body else [body]
    if not isinstance(items, list) or not items:
        raise BadBody('expected an event object or {"events": [...]}')
    if len(items) > MAX_EVENTS:
        raise BadBody(f"more than {MAX_EVENTS} events in one body")
    out = []
    for i, item in enumerate(items):
        where = f"events[{i}]"
        if not isinstance(item, dict):
            raise BadBody(f"{where}: not an object")
        unknown = set(item) - {
            "node",
            "code",
            "message",
            "id",
            "at",
            "severity",
            "signature",
            "repeat_count",
            "first_seen",
            "last_seen",
            "gpu",
        }
        if unknown:
            raise BadBody(f"{where}: unknown field {sorted(unknown)[0]!r}")
        node, code = _node(item.get("node"), f"{where}.node"), _code(item.get("code"), f"{where}.code")
        message = _text(item.get("message"), f"{where}.message")
        if code is None and not message:
            raise BadBody(f"{where}: give a code or a message")
        event_id = _text(item.get("id"), f"{where}.id")
        at = _time(item["at"], f"{where}.at") if "at" in item else now
        if "first_seen" in item:
            at = min(at, _time(item["first_seen"], f"{where}.first_seen"))
        signature = _signature(item.get("signature"), f"{where}.signature")
        severity = _severity(
            item.get("severity"), code, f"{where}.severity", strict=True, policy=policy, signature=signature
        )
        repeat_count, last_at = _repeats(item, at, where)
        anonymous = not event_id and "at" not in item
        out.append(
            IntakeEvent(
                node,
                "intake",
                code,
                message,
                health_event_id("json", node, event_id)
                if event_id
                else health_event_id("json", node, code, message, at),
                at,
                severity,
                "at" in item,
                health_event_id("json-content", node, code, message, severity) if anonymous else "",
                signature,
                repeat_count,
                last_at,
                _gpu(item.get("gpu"), f"{where}.gpu"),
            )
        )
    return out


def _gpu(value: object, where: str) -> str:
    """The GPU's PCI address as gpu_key spells it, or "" when none is given."""
    if value is None or value == "":
        return ""
    try:
        return gpu_key(value) if isinstance(value, str) else gpu_key(str(value)[:40])
    except NotAGpuAddress as exc:
        raise BadBody(f"{where}: {exc}") from None


# Node Problem Detector's conditions that mean the node must not run work. Operators add
# their own condition types with --condition.
NPD_CONDITIONS = ("KernelDeadlock", "ReadonlyFilesystem", "GPUProblem", "XidError", "NVLinkProblem")

# Reads the faults in a kernel message (fleetctl.agent.detect.detect).
Detector = Callable[[str], list[Fault]]


def from_node_conditions(
    node: object, watched: tuple[str, ...], detect: Detector, skipped: list[str] | None = None
) -> list[IntakeEvent]:
    """A Kubernetes Node's watched conditions that are True, from the API's own JSON. The id
    is the condition's last transition: the same condition seen on every poll is one event.
    `detect` reads an Xid from the condition's message (NPD copies the kernel line there).

    Each condition is read on its own: one that cannot be read (not an object, a field of
    the wrong type, a time that is not RFC 3339) is skipped, and why goes to `skipped`; the
    node's other conditions are still read. A node without a readable name raises BadBody.
    Texts are cut to MAX_TEXT, lone surrogates and NUL replaced."""
    fields = node if isinstance(node, dict) else {}
    meta = fields.get("metadata")
    name = _node(meta.get("name") if isinstance(meta, dict) else None, "node")
    status = fields.get("status") or {}
    conditions = status.get("conditions") or [] if isinstance(status, dict) else None
    if not isinstance(conditions, list):
        raise BadBody(f"node {name}: status.conditions is not a list")
    out = []
    for i, cond in enumerate(conditions):
        try:
            if (event := _condition(name, cond, watched, detect)) is not None:
                out.append(event)
        except BadBody as exc:
            if skipped is not None:
                skipped.append(f"node {name}: conditions[{i}]: {exc}")
    return out


def _condition(name: str, cond: object, watched: tuple[str, ...], detect: Detector) -> IntakeEvent | None:
    if not isinstance(cond, dict):
        raise BadBody("not an object")
    kind, status = cond.get("type"), cond.get("status")
    if not isinstance(kind, str) or not isinstance(status, (str, type(None))):
        raise BadBody("type or status is not a string")
    if kind not in watched or status != "True":
        return None
    message = bounded(_text(cond.get("message"), "message"))
    reason = bounded(_text(cond.get("reason"), "reason"), 256)
    try:
        faults = detect(message)
    except ValueError:  # an Xid line the parser cannot read: the condition still stands, without a code
        faults = []
    changed = cond.get("lastTransitionTime") or ""
    if not isinstance(changed, str) or len(changed) > 64:
        raise BadBody("lastTransitionTime is not a time")
    at = _time(changed, "lastTransitionTime") if changed else 0.0
    return IntakeEvent(
        name,
        "npd",
        faults[0].code if faults else None,
        bounded(f"{kind}: {reason} {message}".strip()),
        health_event_id("npd", name, kind, changed),
        at,
        faults[0].severity if faults else "",
        bool(changed),
        signature=faults[0].signature if faults else "",
    )
