"""One line of text for an error message. Pure.

Every message fleetctl shows or records about a failure from elsewhere (an exception of a
library, a BMC's or an API server's error body, a template error) goes through `one_line`:
an operator reads one line per failure, a log line stays one line, and a control character
in someone else's text cannot move the terminal's cursor or forge a line of its own.
"""

from __future__ import annotations

import re

# Cc characters but the whitespace that `str.split` already folds (tab, newline, ...).
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")
LIMIT = 300


def one_line(error: BaseException | str, limit: int = LIMIT) -> str:
    """`error`'s text with whitespace runs folded to one space, control characters shown as
    \\xNN, cut to `limit` characters; an exception without text gives its class name."""
    text = " ".join(str(error).split())
    text = _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)
    if not text and isinstance(error, BaseException):
        return type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
