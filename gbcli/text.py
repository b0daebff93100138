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


def printable(text: Any) -> str:
    """`text` with every non-printable character escaped (`\\x1b`, `\\n`): a name that came from a file
    or a folder never moves the cursor, clears the screen or retitles the terminal."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
