"""Shared text helpers for the parsers: one number reader, one prefix stripper, one verdict."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any, Literal, overload

from fleetctl.checks.result import CheckResult, Finding, Status

# Cells that tools print where a number would be when it has none to give.
NOT_AVAILABLE = frozenset({"N/A", "[N/A]", "n/a", "NA", "-", "Not Supported", "[Not Supported]"})

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# Units nvidia-smi and friends print after a number ("700.00 W", "16x", "3071 bank(s)").
_UNIT_SUFFIX = re.compile(r"\s*(?:%|W|C|MHz|MiB|KB/s|GB/s|Gb/s|GT/s|x|us|ms|mV|bank\(s\))$")


class UnjudgeableOutput(ValueError):
    """The text is not (all of) the tool's output: empty, cut short, garbled, another format.

    Parsers raise it; `checks.judge` turns it into an ERROR result with this message.
    """


class NotANumber(UnjudgeableOutput):
    """A cell that should hold a number holds something else (the output is corrupt)."""

    def __init__(self, cell: str):
        super().__init__(f"expected a number, found {cell.strip()[:40]!r}")


# A cell read without allow_missing is a number or raises: the overloads say so, so that
# callers need no None check for a value that cannot be None.
@overload
def number(cell: str, *, allow_missing: Literal[False] = False, strip_unit: bool = False) -> float: ...
@overload
def number(cell: str, *, allow_missing: bool, strip_unit: bool = False) -> float | None: ...
def number(cell: str, *, allow_missing: bool = False, strip_unit: bool = False) -> float | None:
    """Read one numeric cell as printf's %d/%f/%g/%e writes it, or hex (0x...).

    `allow_missing` accepts N/A-style cells as None. `strip_unit` drops a trailing unit
    ("700.00 W", "16x", "55 C"). Anything else raises NotANumber, so a garbled cell can
    never pass as a value.
    """
    text = cell.strip()
    if allow_missing and text in NOT_AVAILABLE:
        return None
    if strip_unit:
        text = _UNIT_SUFFIX.sub("", text) if not text.lower().startswith("0x") else text
    if text.lower().startswith("0x"):
        try:
            return float(int(text, 16))
        except ValueError:
            raise NotANumber(cell) from None
    if not _NUMBER.fullmatch(text) or not math.isfinite(value := float(text)):
        raise NotANumber(cell)  # "1e400" is no measurement either
    return value


_DIGITS = re.compile(r"[+-]?\d{1,40}")  # read exactly: a 64-bit counter does not fit a float


@overload
def integer(cell: str, *, allow_missing: Literal[False] = False, strip_unit: bool = False) -> int: ...
@overload
def integer(cell: str, *, allow_missing: bool, strip_unit: bool = False) -> int | None: ...
def integer(cell: str, *, allow_missing: bool = False, strip_unit: bool = False) -> int | None:
    if _DIGITS.fullmatch(cell.strip()):
        return int(cell.strip())
    value = number(cell, allow_missing=allow_missing, strip_unit=strip_unit)
    if value is None:
        return None
    if value != int(value):
        raise NotANumber(cell)
    return int(value)


# Launchers prefix each line of a rank's output: srun -l writes " 0: ", mpirun
# --tag-output writes "[1,0]<stdout>:", pdsh/clush write "host: ".
_LAUNCHER_PREFIX = re.compile(r"^\s*(?:\d+:\s|\[\d+,\d+\]<std(?:out|err)>:\s?)")


def strip_launcher_prefix(line: str) -> str:
    return _LAUNCHER_PREFIX.sub("", line, count=1)


def lines_of(text: str) -> list[str]:
    return [strip_launcher_prefix(line.rstrip("\r")) for line in text.splitlines()]


REASON_MAX_CHARS = 160  # the reason is one line in a table; findings carry the full text


def verdict(
    findings: Iterable[Finding],
    metrics: dict[str, Any],
    ok_reason: str,
) -> CheckResult:
    """PASS unless a finding says otherwise; the worst finding's text becomes the reason."""
    findings = list(findings)
    fails = [f for f in findings if f.severity == "fail"]
    warns = [f for f in findings if f.severity == "warn"]
    if fails:
        return CheckResult(Status.FAIL, metrics, findings, _summarise(fails))
    if warns:
        return CheckResult(Status.WARN, metrics, findings, _summarise(warns))
    return CheckResult(Status.PASS, metrics, findings, ok_reason)


def _summarise(findings: list[Finding]) -> str:
    first = findings[0]
    text = f"{first.where}: {first.what}" if first.where else first.what
    if len(text) > REASON_MAX_CHARS:
        text = text[: REASON_MAX_CHARS - 3] + "..."
    more = len(findings) - 1
    return text + (f" (and {more} more)" if more else "")
