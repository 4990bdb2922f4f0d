"""Redfish client for a node's BMC: power, system identity, firmware inventory, SimpleUpdate.

Standard library only (urllib, json): the few calls fleetctl makes do not need more.

Credentials arrive as arguments and travel only as an HTTP basic Authorization header.
They are never logged and never put in an exception or a repr; error text the BMC sends
back is scrubbed of them too. Two HTTP defaults are turned off for the same reason:
environment proxies (BMCs sit on a management network, and an internet proxy must not see
their credentials) and redirects to another origin (urllib would replay the header there).
Resource links the BMC hands out (task Locations, @odata.id) are followed only when they
stay on the BMC's own origin.

Boot identity: Redfish has no boot id. `SystemInfo.boot_id` is `LastResetTime` where the
BMC reports it (newer ComputerSystem schemas), else `BootProgress.LastStateTime`; both
change on every boot. `reboot` waits for that value to change, or, on BMCs that report
neither (sushy-tools' fake driver among them), for the power state to go Off and back On.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import re
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from fleetctl.bmc.base import RESET_TYPES, BmcError, BootNotSeen
from fleetctl.checks.transcript import section
from fleetctl.remediation.firmware import validate_image_uri
from fleetctl.text import one_line

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0
SYSTEMS = "/redfish/v1/Systems"
UPDATE_SERVICE = "/redfish/v1/UpdateService"
FIRMWARE_INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
# Members in the collection's answer where the BMC offers $expand (Redfish 1.6+); a BMC that
# does not ignores the query and lists links only, which are then read one by one.
EXPAND_MEMBERS = "?$expand=.($levels=1)"
# The chassis checks' reports (checks/chassis.py): the sensors and the logs.
HEALTH_REPORTS = ("sensors", "log")
MAX_LOG_PAGES = 50  # a log's pages read beyond its first (a full SEL is a few thousand entries)

TASK_FAILED_STATES = frozenset({"Exception", "Killed", "Cancelled"})


class BmcUnreachable(BmcError):
    """No answer from the BMC: connection refused, timed out, TLS or network failure."""


class BmcAuthFailed(BmcError):
    """The BMC rejected the credentials (401) or the user's privileges (403)."""


@dataclass(frozen=True)
class SystemInfo:
    id: str
    name: str | None
    uuid: str | None
    power_state: str | None  # "On", "Off", "PoweringOn", "PoweringOff", "Paused"
    boot_progress: str | None  # BootProgress.LastState, e.g. "OSRunning"
    boot_progress_time: str | None  # BootProgress.LastStateTime
    last_reset_time: str | None  # LastResetTime

    @property
    def boot_id(self) -> str | None:
        """A value that changes with every boot, where the BMC reports one; see the module doc."""
        return self.last_reset_time or self.boot_progress_time


@dataclass(frozen=True)
class FirmwareComponent:
    uri: str  # what SimpleUpdate's Targets name
    id: str
    name: str | None
    version: str | None
    updateable: bool | None


@dataclass(frozen=True)
class TaskResult:
    uri: str
    state: str  # TaskState: "Completed" when returned by wait_for_task
    status: str | None  # TaskStatus: "OK", "Warning", "Critical"
    messages: tuple[str, ...] = ()


class RedfishClient:
    """One BMC, reached at `base_url` (its origin, e.g. https://10.1.2.3) with basic auth.

    `verify_tls=False` accepts any certificate (factory-default BMC certificates are
    self-signed); `ca_file` trusts a private CA instead.
    """

    def __init__(
        self,
        base_url: str,
        username: str,
        password: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        verify_tls: bool = True,
        ca_file: str | None = None,
        allow_http: bool = False,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("BMC URL must be http(s)://host[:port]")
        # Plain http would carry the fleet-wide Basic credentials in clear; only this machine
        # (emulators, a local proxy) or an explicit `allow_http` (setting bmc_allow_http) may.
        if parts.scheme == "http" and not allow_http and parts.hostname not in ("127.0.0.1", "::1", "localhost"):
            raise ValueError("BMC URL must use https (plain http is refused unless bmc_allow_http is set)")
        if parts.username is not None or parts.password is not None:
            raise ValueError("BMC URL must not carry credentials; pass username and password")
        self.base_url = f"{parts.scheme}://{parts.netloc}"
        self.username = username
        token = base64.b64encode(f"{username}:{password}".encode()).decode()
        self._authorization = f"Basic {token}"
        self._secrets = tuple(secret for secret in (password, token) if secret)
        self._timeout_s = timeout_s
        if verify_tls:
            tls = ssl.create_default_context(cafile=ca_file)
        else:
            tls = ssl.create_default_context()
            tls.check_hostname = False
            tls.verify_mode = ssl.CERT_NONE
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}),
            urllib.request.HTTPSHandler(context=tls),
            _SameOriginRedirects(self.base_url),
        )

    def __repr__(self) -> str:
        return f"RedfishClient({self.base_url!r}, user={self.username!r})"

    # -- systems and power -------------------------------------------------------------

    def systems(self) -> list[str]:
        """The ids of the systems this BMC manages (usually one)."""
        collection = self._get(SYSTEMS)
        return [member["@odata.id"].rstrip("/").rsplit("/", 1)[-1] for member in collection.get("Members", [])]

    def system_info(self, system_id: str) -> SystemInfo:
        system = self._get(f"{SYSTEMS}/{system_id}")
        boot_progress = system.get("BootProgress") or {}
        return SystemInfo(
            id=system.get("Id", system_id),
            name=system.get("Name"),
            uuid=system.get("UUID"),
            power_state=system.get("PowerState"),
            boot_progress=boot_progress.get("LastState"),
            boot_progress_time=boot_progress.get("LastStateTime"),
            last_reset_time=system.get("LastResetTime"),
        )

    def power_state(self, system_id: str) -> str | None:
        return self.system_info(system_id).power_state

    def reset(self, system_id: str, reset_type: str = "ForceRestart") -> None:
        """Ask for ComputerSystem.Reset; returns once the BMC accepted it, not when done."""
        if reset_type not in RESET_TYPES:
            raise ValueError(f"unknown Redfish ResetType {reset_type!r}")
        target = self._action_target(f"{SYSTEMS}/{system_id}", "#ComputerSystem.Reset")
        self._request("POST", target, {"ResetType": reset_type})
        log.info("BMC %s: system %s reset (%s)", self.base_url, system_id, reset_type)

    def reboot(
        self,
        system_id: str,
        *,
        reset_type: str = "ForceRestart",
        timeout_s: float = 600.0,
        poll_s: float = 5.0,
    ) -> SystemInfo:
        """Reset the system and wait until it has booted again; returns its new state.

        Booted again: power On and either the boot id changed or power was seen Off since
        the reset. Raises BootNotSeen when that does not happen within timeout_s, BmcError
        when the BMC refuses.
        """
        before = self.system_info(system_id)
        self.reset(system_id, reset_type)
        deadline = time.monotonic() + timeout_s
        seen_off = False
        while True:
            current = self.system_info(system_id)
            seen_off = seen_off or current.power_state == "Off"
            rebooted = before.boot_id is not None and current.boot_id not in (None, before.boot_id)
            if current.power_state == "On" and (rebooted or seen_off):
                return current
            if time.monotonic() >= deadline:
                raise BootNotSeen(
                    f"BMC {self.base_url}: system {system_id} did not boot again within {timeout_s:g}s "
                    f"after {reset_type} (last power state {current.power_state})"
                )
            time.sleep(poll_s)

    # -- firmware ----------------------------------------------------------------------

    def firmware_inventory(self) -> list[FirmwareComponent]:
        collection = self._get(FIRMWARE_INVENTORY)
        components = []
        for member in collection.get("Members", []):
            uri = member["@odata.id"]
            item = self._get(uri)
            components.append(
                FirmwareComponent(
                    uri=uri,
                    id=item.get("Id") or uri.rstrip("/").rsplit("/", 1)[-1],
                    name=item.get("Name"),
                    version=item.get("Version"),
                    updateable=item.get("Updateable"),
                )
            )
        return components

    def firmware_report(self, timeout_s: float) -> str:
        """The BMC's firmware inventory as checks.firmware reads it, one JSON document a line:
        every UpdateService FirmwareInventory member (a SoftwareInventory, expanded with
        $expand where the BMC offers it), or, where the BMC serves no inventory (404), every
        Manager, whose FirmwareVersion is the BMC's own firmware. The whole read gives up
        after `timeout_s`: its caller has a deadline of its own."""
        deadline = time.monotonic() + timeout_s
        try:
            collection = self._get(FIRMWARE_INVENTORY + EXPAND_MEMBERS, deadline=deadline)
        except BmcError as exc:
            if ": HTTP 404" not in str(exc):
                raise
            managers = self._get("/redfish/v1/Managers", deadline=deadline).get("Members", [])
            return "".join(json.dumps(self._get(m["@odata.id"], deadline=deadline)) + "\n" for m in managers)
        documents = [
            m if "Version" in m else self._get(m["@odata.id"], deadline=deadline)
            for m in collection.get("Members", [])
            if isinstance(m, dict) and "@odata.id" in m
        ]
        return "".join(json.dumps(d) + "\n" for d in documents)

    # -- the chassis' health (checks/chassis.py judges it) ------------------------------

    def health_report(self, kind: str) -> str:
        """The documents a chassis check judges, each under its transcript step
        (checks.transcript): `sensors`, every chassis' Thermal and Power; `log`, the entries of
        every log service of every system and manager. A resource the BMC does not serve
        (404, or no link to it) is left out; any other failure raises BmcError."""
        if kind not in HEALTH_REPORTS:
            raise ValueError(f"unknown BMC health report {kind!r}: one of {', '.join(HEALTH_REPORTS)}")
        if kind == "sensors":
            return "".join(
                section(_label(link.lower(), chassis), json.dumps(doc) + "\n")
                for chassis in self._members("/redfish/v1/Chassis")
                for link in ("Thermal", "Power")
                if (doc := self._linked(chassis, link)) is not None
            )
        out = []
        for owner in (*self._members(SYSTEMS), *self._members("/redfish/v1/Managers")):
            services = self._linked(owner, "LogServices")
            for service in self._members_of(services):
                entries = self._linked(service, "Entries")
                if entries is not None:
                    entries["Members"] = [*entries.get("Members", []), *self._next_pages(entries)]
                    out.append(section(_label("log", owner, service), json.dumps(entries) + "\n"))
        return "".join(out)

    def _members(self, path: str) -> list[dict[str, Any]]:
        return self._members_of(self._get(path))

    def _members_of(self, collection: dict[str, Any] | None) -> list[dict[str, Any]]:
        if collection is None:
            return []
        return [
            self._get(m["@odata.id"]) for m in collection.get("Members", []) if isinstance(m, dict) and "@odata.id" in m
        ]

    def _linked(self, resource: dict[str, Any], link: str) -> dict[str, Any] | None:
        """The resource `link` names, or None when it names none or the BMC answers 404."""
        target = resource.get(link)
        if not isinstance(target, dict) or not isinstance(target.get("@odata.id"), str):
            return None
        try:
            return self._get(target["@odata.id"])
        except BmcError as exc:
            if ": HTTP 404" in str(exc):
                return None
            raise

    def _next_pages(self, collection: dict[str, Any]) -> list[Any]:
        """The members of a collection's further pages (Members@odata.nextLink), at most MAX_LOG_PAGES."""
        more: list[Any] = []
        link = collection.get("Members@odata.nextLink")
        for _ in range(MAX_LOG_PAGES):
            if not isinstance(link, str):
                break
            page = self._get(link)
            more += page.get("Members", [])
            link = page.get("Members@odata.nextLink")
        return more

    def simple_update(self, image_uri: str, targets: Sequence[str] = ()) -> str | None:
        """Start UpdateService.SimpleUpdate; returns the task to poll, or None if the BMC gave none.

        `targets` are FirmwareComponent.uri values (or system/manager URIs); empty means
        the BMC decides from the image.
        """
        body: dict[str, Any] = {"ImageURI": image_uri, "TransferProtocol": validate_image_uri(image_uri)}
        if targets:
            body["Targets"] = list(targets)
        target = self._action_target(UPDATE_SERVICE, "#UpdateService.SimpleUpdate")
        _, headers, answer = self._request("POST", target, body)
        # A Task in the body names the task resource; Location may be a task monitor instead.
        if isinstance(answer, dict) and "TaskState" in answer and "@odata.id" in answer:
            task: str | None = answer["@odata.id"]
        else:
            task = headers.get("Location")
        log.info("BMC %s: SimpleUpdate started, task %s", self.base_url, task)
        return task

    def wait_for_task(self, task_uri: str, *, timeout_s: float = 3600.0, poll_s: float = 10.0) -> TaskResult:
        """Poll a Redfish task until Completed (returned) or failed/timed out (BmcError)."""
        deadline = time.monotonic() + timeout_s
        while True:
            status, _, answer = self._request("GET", task_uri)
            task = answer if isinstance(answer, dict) else {}
            state = task.get("TaskState")
            # A task monitor answers 202 while the task runs, then the operation's own
            # result, which has no TaskState; a task resource always has one.
            if status != 202:
                if state is None:
                    return TaskResult(uri=task_uri, state="Completed", status=None)
                messages = tuple(
                    one_line(message["Message"])
                    for message in task.get("Messages", [])
                    if isinstance(message, dict) and message.get("Message")
                )
                result = TaskResult(uri=task_uri, state=state, status=task.get("TaskStatus"), messages=messages)
                if state == "Completed":
                    return result
                if state in TASK_FAILED_STATES:
                    detail = "; ".join(messages) or "no message"
                    raise BmcError(self._scrub(f"BMC {self.base_url}: task {task_uri} ended {state}: {detail}"))
            if time.monotonic() >= deadline:
                raise BmcError(f"BMC {self.base_url}: task {task_uri} still {state or 'running'} after {timeout_s:g}s")
            log.debug("BMC %s: task %s %s (%s%%)", self.base_url, task_uri, state, task.get("PercentComplete"))
            time.sleep(poll_s)

    # -- HTTP --------------------------------------------------------------------------

    def _get(self, path: str, deadline: float | None = None) -> dict[str, Any]:
        _, _, answer = self._request("GET", path, deadline=deadline)
        if not isinstance(answer, dict):
            raise BmcError(f"BMC {self.base_url}: GET {path}: expected a JSON object")
        return answer

    def _action_target(self, resource: str, action: str) -> str:
        target = self._get(resource).get("Actions", {}).get(action, {}).get("target")
        if not target:
            raise BmcError(f"BMC {self.base_url}: {resource} offers no {action.lstrip('#')} action")
        return str(target)

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None, deadline: float | None = None
    ) -> tuple[int, http.client.HTTPMessage, Any]:
        """One request, given up after the client's timeout or at `deadline` (time.monotonic)."""
        url = self._url(path)
        timeout_s = self._timeout_s if deadline is None else min(self._timeout_s, deadline - time.monotonic())
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", "OData-Version": "4.0", "Authorization": self._authorization}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        where = f"BMC {self.base_url}: {method} {urlsplit(url).path}"
        if timeout_s <= 0:
            raise BmcUnreachable(f"{where}: not sent: the read ran out of time")
        try:
            with self._opener.open(request, timeout=timeout_s) as response:
                status, response_headers, raw = response.status, response.headers, response.read()
        except urllib.error.HTTPError as exc:
            raise self._http_error(where, exc) from exc
        except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, TLS, resets
            reason = getattr(exc, "reason", None) or exc
            raise BmcUnreachable(self._scrub(f"{where}: unreachable: {one_line(str(reason))}")) from exc
        log.debug("%s -> %s", where, status)
        try:
            answer = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise BmcError(f"{where}: answer is not JSON") from None
        return status, response_headers, answer

    def _url(self, path: str) -> str:
        url = urljoin(self.base_url + "/", path)
        parts = urlsplit(url)
        if f"{parts.scheme}://{parts.netloc}" != self.base_url:
            raise BmcError(f"BMC {self.base_url}: refusing to follow a link to another host: {parts.netloc}")
        return url

    def _http_error(self, where: str, exc: urllib.error.HTTPError) -> BmcError:
        if exc.code == 401:
            return BmcAuthFailed(f"{where}: HTTP 401: the BMC rejected the credentials of user {self.username!r}")
        if exc.code == 403:
            return BmcAuthFailed(f"{where}: HTTP 403: user {self.username!r} is not allowed to do this")
        if 300 <= exc.code < 400:
            return BmcError(f"{where}: HTTP {exc.code}: redirect not followed (another host, or not a GET)")
        try:
            message = _redfish_message(json.loads(exc.read() or b"{}"))
        except ValueError:
            message = None
        return BmcError(self._scrub(one_line(f"{where}: HTTP {exc.code}: {message or exc.reason}")))

    def _scrub(self, text: str) -> str:
        """Text the BMC wrote may echo anything; the credentials never leave this object."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text


def _label(kind: str, *resources: dict[str, Any]) -> str:
    """A transcript step's label: the kind and the resources' ids, in the characters a label holds."""
    ids = [str(r.get("Id") or r.get("@odata.id", "").rstrip("/").rsplit("/", 1)[-1]) for r in resources]
    return " ".join([kind, *(re.sub(r"[^A-Za-z0-9_.:@-]", "_", i)[:60] or "_" for i in ids)])


class RedfishBmc:
    """The Bmc interface over Redfish: the BMC's first system, SimpleUpdate with its task."""

    def __init__(self, client: RedfishClient) -> None:
        self.client = client

    def __repr__(self) -> str:
        return f"RedfishBmc({self.client!r})"

    def reboot(self, reset_type: str, timeout_s: float, poll_s: float) -> None:
        systems = self.client.systems()
        if not systems:
            raise BmcError(f"BMC {self.client.base_url}: no system on the BMC")
        self.client.reboot(systems[0], reset_type=reset_type, timeout_s=timeout_s, poll_s=poll_s)

    def health_report(self, kind: str) -> str:
        return self.client.health_report(kind)

    def firmware_report(self, timeout_s: float) -> str:
        return self.client.firmware_report(timeout_s)

    def update_firmware(self, image_uri: str, targets: Sequence[str], timeout_s: float) -> None:
        task = self.client.simple_update(image_uri, targets)
        if task:
            self.client.wait_for_task(task, timeout_s=timeout_s)


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects on the BMC's own origin; elsewhere the answer stays an error."""

    def __init__(self, origin: str) -> None:
        self._origin = origin

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        target = urlsplit(urljoin(req.full_url, newurl))
        if f"{target.scheme}://{target.netloc}" != self._origin:
            return None
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _redfish_message(answer: Any) -> str | None:
    """The error's message, and its first extended message where that says more."""
    error = answer.get("error") if isinstance(answer, dict) else None
    if not isinstance(error, dict):
        return None
    message = error.get("message")
    extended = [info.get("Message") for info in error.get("@Message.ExtendedInfo", []) if isinstance(info, dict)]
    detail = next((text for text in extended if text and text != message), None)
    return f"{message} ({detail})" if message and detail else message or detail
