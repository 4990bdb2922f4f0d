"""Text from nodes, kernel logs, libraries and operators, made safe to show. Pure.

Check output, XID messages and causes are recorded verbatim (the database keeps the
evidence as it was); what reaches a terminal or a Markdown document must not carry escape
sequences: a window-title, clear-screen or OSC-8 link sequence in a kernel message would
act on the operator's terminal. Control and format characters (Unicode Cc and Cf: C0, DEL,
C1, bidirectional overrides, zero-width characters) are shown as visible escapes instead.

Every message fleetctl shows or records about a failure from elsewhere (an exception of a
library, a BMC's or an API server's error body, a template error) goes through `one_line`:
an operator reads one line per failure, and a log line stays one line.

Every text fleetctl takes in from elsewhere (an event's message, an alert's labels and
annotations, an operator's reason, a cause it hands a scheduler) goes through `bounded`
where it enters: one limit, and nothing that cannot be encoded, so no input can make a
record fail or a payload outgrow what Temporal and the schedulers accept.
"""

from __future__ import annotations

import re
import unicodedata

LIMIT = 300
# The one bound on text taken in: a burst of 200 health events stays under Temporal's 512 KiB
# payload warning (workflows.definitions.health_queue.EVENTS_PER_ACTIVITY), and a drain cause
# well inside what `scontrol update Reason=` takes on its command line.
MAX_TEXT = 2048
_CUT = "…"
# What no record may hold: lone UTF-16 surrogates (no UTF-8 encoder takes one; JSON's
# "\ud800" and a journal's undecodable bytes decode to them) and NUL (PostgreSQL's text
# refuses it).
_UNENCODABLE = re.compile("[\x00\ud800-\udfff]")


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, keep_newlines: bool = True) -> str:
    """`text` with every control or format character escaped (`\\x1b`, `\\u202e`); newlines
    and tabs stay when `keep_newlines`."""
    kept = "\n\t" if keep_newlines else ""
    if text.isprintable() and not any(c in text for c in "\n\t"):
        return text
    return "".join(c if c in kept or unicodedata.category(c) not in ("Cc", "Cf") else _escape(c) for c in text)


def one_line(error: BaseException | str, limit: int = LIMIT) -> str:
    """`error`'s text with whitespace runs folded to one space, control and format characters
    escaped, cut to `limit` characters; an exception without text gives its class name."""
    text = printable(" ".join(str(error).split()), keep_newlines=False)
    if not text and isinstance(error, BaseException):
        return type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def failure_message(error: BaseException) -> str:
    """What a failure from Temporal says (an update, a workflow or an activity that failed): the
    message of the failure it wraps (an ApplicationError's, without its type), else the wrapped
    error, else the error itself."""
    cause = getattr(error, "cause", None)
    return getattr(cause, "message", None) or str(cause or error)


def bounded(text: str, limit: int = MAX_TEXT) -> str:
    """`text` safe to record and send on: every lone UTF-16 surrogate and NUL replaced by
    U+FFFD (as errors="replace" decoding does for undecodable bytes), then cut to `limit`
    characters, the cut marked with "…". Other control characters stay: the record keeps the
    evidence, `printable` escapes them where they are shown. `bounded(x) == x` says x needed
    neither."""
    if _UNENCODABLE.search(text):
        text = _UNENCODABLE.sub("\ufffd", text)
    return text if len(text) <= limit else text[: limit - 1] + _CUT


def plural(count: float, noun: str, nouns: str | None = None) -> str:
    """`1 node`, `2 nodes`, `0 nodes`, `1.5 days`: a count and its noun, the one way every
    message says it (`nouns` for a plural that is not the noun and an s: `2 batches`)."""
    return f"{count:g} {noun if count == 1 else nouns or noun + 's'}"


def times(count: int) -> str:
    """How often, in words: `once`, `twice`, `3 times`."""
    return {1: "once", 2: "twice"}.get(count, f"{count} times")
