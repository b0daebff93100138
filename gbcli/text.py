"""Text for messages: values quoted in an error line are shortened, so a 1 MB value (a name, a
key, an override) gives a readable one-line error that still names the key."""

from __future__ import annotations

from typing import Any

LIMIT = 200   # characters of a value quoted in a message


def shorten(text: str, limit: int = LIMIT) -> str:
    """`text` if it has at most `limit` characters, else its head and tail joined by `...` and
    followed by its length: `'xxxxx...xxx' (1,000,002 characters)`, at most about `limit` long."""
    text = str(text)
    if len(text) <= limit:
        return text
    note = f" ({len(text):,} characters)"
    keep = max(limit - len(note) - 3, 2)
    head = keep - keep // 3
    return f"{text[:head]}...{text[len(text) - (keep - head):]}{note}"


def quoted(value: Any, limit: int = LIMIT) -> str:
    """repr(value), shortened (see `shorten`)."""
    return shorten(repr(value), limit)
