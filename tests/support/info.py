"""Parsing INFO replies."""
from __future__ import annotations



def parse_info(text: bytes) -> dict:
    out = {}
    for line in text.decode().split("\r\n"):
        if not line or line.startswith("#") or ":" not in line:
            continue
        k, v = line.split(":", 1)
        out[k] = v
    return out


def info_sections(text: bytes) -> dict:
    """Map section name -> list of lines (without the header)."""
    sections = {}
    current = None
    for line in text.decode().split("\r\n"):
        if line.startswith("# "):
            current = line[2:].strip()
            sections[current] = []
        elif line and current is not None:
            sections[current].append(line)
    return sections
