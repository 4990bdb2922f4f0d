"""Slurm's host lists (`gpu-[002-008,017]`), read and written as scontrol's `show hostnames`
and `show hostlist` do. Pure.

Reading is bounded: a range expands to at most MAX_HOSTS names, so `gpu-[0-999999999]` is
one line of error, not a process that fills its memory; and every number in a range is
ASCII digits below 2^64 (Slurm's hostlist reads them as unsigned 64-bit integers, so a range
past that wraps around and names other hosts than the one written).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_HOSTS = 100_000
MAX_NUMBER = 2**64 - 1
_DIGITS = re.compile(r"[0-9]{1,20}\Z")  # ASCII: str.isdigit() takes "²", which int() refuses
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_TRAILING_NUMBER = re.compile(r"^(.*?)([0-9]+)\Z")


class HostListError(ValueError):
    pass


def expand(expression: str) -> list[str]:
    """`gpu-[002-004,017],cpu1` -> gpu-002, gpu-003, gpu-004, gpu-017, cpu1; in order, without
    repeats. Zero padding is kept from the range's start (`[002-010]` gives 002 ... 010);
    several bracket groups in one name multiply (`r[1-2]n[1-2]`)."""
    names: list[str] = []
    for item in _split_top_level(expression):
        names.extend(_expand_one(item))
        if len(names) > MAX_HOSTS:
            raise HostListError(f"host list {expression[:60]!r} names more than {MAX_HOSTS} hosts")
    return list(dict.fromkeys(names))


def expand_all(expressions: Iterable[str]) -> list[str]:
    """Each argument a host list; the names of all of them, in order, without repeats, at
    most MAX_HOSTS in all."""
    names: dict[str, None] = {}
    for expression in expressions:
        names.update(dict.fromkeys(expand(expression)))
        if len(names) > MAX_HOSTS:
            raise HostListError(f"the host lists name more than {MAX_HOSTS} hosts")
    return list(names)


def _split_top_level(expression: str) -> list[str]:
    items, depth, current = [], 0, ""
    for ch in expression:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostListError(f"host list {expression[:60]!r}: ']' without '['")
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    if depth:
        raise HostListError(f"host list {expression[:60]!r}: '[' without ']'")
    items.append(current)
    if any(not i for i in items):
        raise HostListError(f"host list {expression[:60]!r}: an empty name")
    return items


def _expand_one(item: str) -> list[str]:
    match = _BRACKET.search(item)
    if match is None:
        return [item]
    head, tail = item[: match.start()], item[match.end() :]
    out = []
    for part in match.group(1).split(","):
        for number in _range(part, item):
            out.extend(_expand_one(f"{head}{number}{tail}"))
            if len(out) > MAX_HOSTS:
                raise HostListError(f"host list {item[:60]!r} names more than {MAX_HOSTS} hosts")
    return out


def _range(part: str, item: str) -> list[str]:
    low, _, high = part.partition("-")
    if not _DIGITS.match(low) or (high and not _DIGITS.match(high)):
        raise HostListError(f"host list {item[:60]!r}: {part[:40]!r} is not a number or a range a-b")
    if int(low) > MAX_NUMBER or (high and int(high) > MAX_NUMBER):
        raise HostListError(f"host list {item[:60]!r}: {part[:45]} goes past 2^64-1, the largest number Slurm reads")
    if not high:
        return [low]
    start, end = int(low), int(high)
    if end < start:
        raise HostListError(f"host list {item[:60]!r}: range {part} runs backwards")
    if end - start >= MAX_HOSTS:
        raise HostListError(f"host list {item[:60]!r} names more than {MAX_HOSTS} hosts")
    width = len(low)
    return [str(n).zfill(width) for n in range(start, end + 1)]


def compress(names: Iterable[str]) -> str:
    """Names as one host list: runs of consecutive numbers with the same prefix and width
    share brackets (`gpu-001, gpu-002, gpu-003, gpu-017` -> `gpu-[001-003,017]`). Names
    keep their first-seen order by prefix; expand(compress(x)) has the names of x."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    order: list[tuple[str, int] | str] = []
    for name in dict.fromkeys(names):
        m = _TRAILING_NUMBER.match(name)
        # A number past 2^64-1 in a range would wrap in Slurm's reading: such a name is written whole.
        if m is None or "[" in name or "," in name or int(m.group(2)) > MAX_NUMBER:
            plain.append(name)
            order.append(name)
            continue
        key = (m.group(1), len(m.group(2)))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group(2)))
    parts = []
    for entry in order:
        if isinstance(entry, str):
            parts.append(entry)
            continue
        prefix, width = entry
        numbers = sorted(set(groups[entry]))
        if len(numbers) == 1:
            parts.append(f"{prefix}{str(numbers[0]).zfill(width)}")
            continue
        runs, start, prev = [], numbers[0], numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            runs.append(
                str(start).zfill(width) if start == prev else f"{str(start).zfill(width)}-{str(prev).zfill(width)}"
            )
            if n is not None:
                start = prev = n
        parts.append(f"{prefix}[{','.join(runs)}]")
    return ",".join(parts)
