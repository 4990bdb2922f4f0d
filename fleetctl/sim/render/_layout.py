"""Layout helpers several renderers share: aligned `key: value` pairs, nvidia-smi -q's
report tree, DCGM's wrapped cells and the C library's time stamp."""

from __future__ import annotations

import time
from collections.abc import Sequence


def aligned_pairs(pairs: Sequence[tuple[str, str]], key_width: int, indent: str = "") -> list[str]:
    """`Key:   value` lines with every value in one column (flint, mlxfwmanager, nvfwupd)."""
    # An empty key continues the previous value on its own line (flint's "Rom Info").
    return [f"{indent}{(key + ':' if key else '').ljust(key_width)}{value}".rstrip() for key, value in pairs]


# nvidia-smi -q's tree: (label, value) leaves, (label, children) sections, and
# (label, value, children) for a leaf with sub-items (HW Slowdown and its two causes).
ReportTree = Sequence["tuple[str, str] | tuple[str, ReportTree] | tuple[str, str, ReportTree]"]


def report_lines(tree: ReportTree, depth: int = 0) -> list[str]:
    """nvidia-smi -q layout: 4 spaces per level, every ':' in column 42."""
    lines: list[str] = []
    indent = "    " * depth
    for item in tree:
        value: str | None
        if len(item) == 3:
            label, value, children = item
        else:
            label, leaf_or_children = item
            value, children = (leaf_or_children, []) if isinstance(leaf_or_children, str) else (None, leaf_or_children)
        lines.append(indent + label if value is None else f"{(indent + label).ljust(42)}: {value}")
        lines.extend(report_lines(children, depth + 1))
    return lines


def box_rows(text: str, width: int) -> list[str]:
    """Cut text into fixed-width pieces, as DCGM wraps a long cell (mid-word)."""
    return [text[i : i + width] for i in range(0, len(text), width)] or [""]


def ctime(t: float) -> str:
    """strftime("%a %b %e %H:%M:%S %Y") in UTC, as nvidia-smi -q and dmesg -T print times."""
    return time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(t))
