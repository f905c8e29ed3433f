"""How a payload is shown: pretty JSON, text, or hex for binary."""

from __future__ import annotations

import json
from dataclasses import dataclass

DISPLAY_LIMIT = 256 * 1024


@dataclass(frozen=True)
class PayloadView:
    kind: str  # "json", "text" or "binary"
    text: str
    size: int
    truncated: bool


def payload_preview(payload: bytes, limit: int) -> str:
    return payload[: limit * 4].decode("utf-8", errors="replace")[:limit]


def payload_view(payload: bytes) -> PayloadView:
    """Show what a person can read. Hostile text stays text: templates escape it."""
    size = len(payload)
    shown = payload[:DISPLAY_LIMIT]
    truncated = size > DISPLAY_LIMIT
    try:
        text = shown.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and not truncated:
        try:
            return PayloadView("json", json.dumps(json.loads(text), indent=2, ensure_ascii=False),
                               size, False)
        except ValueError:
            pass
    if text is not None and _mostly_printable(text):
        return PayloadView("text", text, size, truncated)
    return PayloadView("binary", _hexdump(shown[:16 * 1024]), size, size > 16 * 1024)


def _mostly_printable(text: str) -> bool:
    return all(ch.isprintable() or ch in "\r\n\t" for ch in text)


def _hexdump(data: bytes) -> str:
    lines = []
    for offset in range(0, len(data), 16):
        chunk = data[offset : offset + 16]
        hex_part = " ".join(f"{b:02x}" for b in chunk)
        ascii_part = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {hex_part:<47}  {ascii_part}")
    return "\n".join(lines)
