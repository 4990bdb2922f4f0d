"""fleetctl in a real terminal: a tmux server of the test's own (its own socket, no user
config), a window of a given size, a command run in it to its end, and the screen read back
with capture-pane, as an operator would see it.

The command's shell signals a tmux channel (`wait-for -S`) when it ends, after printing its
exit status: the test waits on that channel, bounded, never on a guessed sleep.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from fleetctl.config import Settings
from tests.support.services import missing_service

# Before its first line the CLI imports its modules and opens the database: a second or two
# when idle, several times that with other tests running on two shared cores.
COMMAND_S = 60.0
# A tmux client command (capture-pane, kill-server) answers at once: this bounds a hung server.
TMUX_S = 10.0
FLEETCTL = str(Path(sys.executable).parent / "fleetctl")
_EXITED = re.compile(r"\[exited (\d+)\]")


@dataclass(frozen=True)
class Screen:
    """What the window showed when the command ended: every line written (the scrollback
    included; a line the window wrapped is one line here), and the command's exit status."""

    text: str
    exit_code: int

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()


class Terminal:
    """A `columns` x `lines` terminal; `run(shell_line)` runs one command line in it."""

    def __init__(self, columns: int = 80, lines: int = 24) -> None:
        if shutil.which("tmux") is None:
            missing_service("tmux", "no tmux on PATH: install Debian's tmux (make system-deps does)")
        self.columns, self.lines = columns, lines
        self.socket = f"fleetctl-term-{uuid.uuid4().hex[:8]}"

    def tmux(self, *args: str, timeout_s: float = TMUX_S) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        ).stdout

    def run(self, shell_line: str, timeout_s: float = COMMAND_S) -> Screen:
        """Run `shell_line` (a shell's command line: pipes allowed) to its end, in a fresh
        window; the program measures the terminal itself, as in an operator's shell (LINES and
        COLUMNS from the test's environment would size it instead)."""
        # A server of its own for each command: the last one's screen is not read again (and a
        # server being killed cannot be asked for a new session).
        self.stop()
        self.socket = f"fleetctl-term-{uuid.uuid4().hex[:8]}"
        channel = f"done-{uuid.uuid4().hex[:8]}"
        script = (
            f'unset LINES COLUMNS; {shell_line}; echo "[exited $?]"; '
            f"tmux -L {self.socket} wait-for -S {channel}; sleep 600"
        )
        self.tmux("new-session", "-d", "-x", str(self.columns), "-y", str(self.lines), "sh -c " + shlex.quote(script))
        try:
            # tmux remembers a signal nobody waited for yet: the order of the two does not matter.
            self.tmux("wait-for", channel, timeout_s=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"`{shell_line}` did not end within {timeout_s:.0f}s; the screen:\n{self.screen()}"
            ) from None
        # A line the terminal wrapped is joined again: a line longer than the window is one that
        # did not fit.
        text = "\n".join(self.scrollback())
        found = _EXITED.findall(text)
        assert found, f"no exit status on the screen:\n{text}"
        return Screen(_EXITED.sub("", text).rstrip("\n"), int(found[-1]))

    def start(self, shell_line: str) -> None:
        """Start `shell_line` and leave it running (`fleet status --watch`): read it with
        wait_screen, end it with stop."""
        self.stop()
        self.socket = f"fleetctl-term-{uuid.uuid4().hex[:8]}"
        self.tmux(
            "new-session",
            "-d",
            "-x",
            str(self.columns),
            "-y",
            str(self.lines),
            "sh -c " + shlex.quote(f'unset LINES COLUMNS; {shell_line}; echo "[exited $?]"; sleep 600'),
        )

    def wait_screen(self, shows, timeout_s: float, what: str) -> str:
        """The visible screen once `shows(screen)` holds, polled; an AssertionError with the
        screen as it was when `timeout_s` ran out."""
        deadline = time.monotonic() + timeout_s
        while True:
            screen = self.screen()
            if shows(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}; the screen:\n{screen}")
            time.sleep(0.1)

    def screen(self) -> str:
        """What the window shows now: its lines, no scrollback."""
        return self.tmux("capture-pane", "-p")

    def scrollback(self) -> list[str]:
        """Every line since the start, a line the terminal wrapped joined again; without the
        window's empty rows below the last line written."""
        text = self.tmux("capture-pane", "-p", "-J", "-S", "-")
        return [line.rstrip() for line in text.rstrip().splitlines()]

    def stop(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=TMUX_S)


def fleetctl(db_url: str, *args: str, temporal: Settings | None = None) -> str:
    """A shell command line running this checkout's fleetctl on `db_url`, and on the Temporal
    server, task queue and fleet of `temporal`; without it on an address nothing listens on,
    so that a read that would ask Temporal says so."""
    where = (
        [
            "--temporal-address",
            temporal.temporal_address,
            "--task-queue",
            temporal.task_queue,
            "--fleet",
            temporal.fleet,
            "--as",
            temporal.operator or "tester@ci",
        ]
        if temporal
        else ["--temporal-address", "127.0.0.1:1"]
    )
    return shlex.join([FLEETCTL, "--db-url", db_url, *where, *args])
