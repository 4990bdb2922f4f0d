"""The one way a test says a service it needs is missing: skip on a developer's machine,
fail in CI.

Every fixture that starts or finds a real service (the Temporal dev server binary,
PostgreSQL, sshd, ssh-agent, Slurm, Chromium, ...) calls `missing_service` when it cannot.
With FLEETCTL_TEST_REQUIRE_SERVICES=1 (`.ci/run` sets it) that is a failure naming what is
missing, so a CI machine without a service fails instead of passing on fewer tests; without
it the test skips with the same reason. tests/test_services_or_fail.py checks that no test
skips any other way.

`not_on_this_kind_of_machine` is the one exception, for what a CI machine cannot have by
construction (journald needs systemd as PID 1, which a container does not run): it always
skips, and says why.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from typing import NoReturn

import pytest

REQUIRE_ENV = "FLEETCTL_TEST_REQUIRE_SERVICES"


def services_required() -> bool:
    """Strictly "1" (required) or unset/"0" (may skip): a typo must not silently mean "skip"."""
    value = os.environ.get(REQUIRE_ENV, "")
    if value not in ("", "0", "1"):
        raise pytest.UsageError(f"{REQUIRE_ENV}={value!r}: expected 1 (services required) or 0")
    return value == "1"


def missing_service(service: str, reason: str) -> NoReturn:
    """Fail (FLEETCTL_TEST_REQUIRE_SERVICES=1) or skip the test that needs `service`."""
    if services_required():
        pytest.fail(f"{service} is missing and {REQUIRE_ENV}=1: {reason}", pytrace=False)
    pytest.skip(f"{service} is missing: {reason}")


def not_on_this_kind_of_machine(feature: str, reason: str) -> NoReturn:
    """Skip, in CI too: `feature` cannot exist on this kind of machine (not a missing install)."""
    pytest.skip(f"{feature} cannot run on this machine: {reason}")


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} not ready after {timeout_s:.0f}s")
