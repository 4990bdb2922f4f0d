"""The firmware image URL a BMC is told to fetch, checked where a baseline is read and again
before the BMC is asked. Pure: no I/O."""

from __future__ import annotations

import unicodedata
from urllib.parse import urlsplit


def validate_image_uri(image_uri: str) -> str:
    """Check a firmware image URL before a BMC fetches it; returns its TransferProtocol.

    The URL is not repeated in the error: it may carry the image server's credentials.
    """
    if any(char.isspace() or unicodedata.category(char).startswith("C") for char in image_uri):
        raise ValueError("firmware image URL must not contain whitespace or control characters")
    parts = urlsplit(image_uri)
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"firmware image URL must use http or https, not {parts.scheme or 'no scheme'}")
    if not parts.hostname:
        raise ValueError("firmware image URL has no host")
    return parts.scheme.upper()
