"""Checks that run several commands (a rail at a time, a pair of nodes at a time) are judged
on one text: each command's output under a marker line naming the step.

    ### fleetctl step: ib_write_bw mlx5_3 1
    <what the command printed>

The shell script of a check echoes the markers itself; a check whose steps run as separate
commands has them written by `section`. A step's output cut inside its last line stays cut
(a marker after it would end that line and make, say, a cut footer look complete).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MARKER = "### fleetctl step: "
_CUT = "### fleetctl: the step's output above ends inside a line"
# What a label may hold: it is echoed by a shell script, so no quote, no separator.
LABEL = re.compile(r"[A-Za-z0-9_.:@ -]{1,200}")


@dataclass(frozen=True)
class Section:
    label: str
    body: str
    cut: bool  # the output ends inside a line: its last line is no evidence


def marker(label: str) -> str:
    if not LABEL.fullmatch(label):
        raise ValueError(f"step label {label!r} has characters a marker line cannot hold")
    return MARKER + label


def section(label: str, output: str) -> str:
    """One step's output under its marker, as a multi-command check writes it."""
    if not output or output.endswith(("\n", "\r")):
        return f"{marker(label)}\n{output}"
    return f"{marker(label)}\n{output}\n{_CUT}\n"


def read_transcript(text: str) -> list[Section]:
    """The steps in order. Text before the first marker (a login banner) is not a step."""
    sections: list[Section] = []
    label: str | None = None
    body: list[str] = []
    cut = False
    for line in text.splitlines(keepends=True):
        stripped = line.rstrip("\r\n")
        if stripped.startswith(MARKER):
            if label is not None:
                sections.append(Section(label, "".join(body), cut))
            label, body, cut = stripped[len(MARKER) :].strip(), [], False
        elif stripped == _CUT and body:
            body[-1], cut = body[-1].rstrip("\r\n"), True
        elif label is not None:
            body.append(line)
    if label is not None:
        sections.append(Section(label, "".join(body), cut or not text.endswith(("\n", "\r"))))
    return sections


def with_stderr(stdout: str, stderr: str) -> str:
    """A command's two streams as one text to judge (some tools say why they failed on stderr
    only). stdout cut inside its last line stays last: put after it, stderr would end that
    line and make a cut footer look complete."""
    if not stdout or stdout.endswith(("\n", "\r")):
        return f"{stdout}{stderr}" if stdout else stderr
    return f"{stderr}\n{stdout}"
