"""Hydra override syntax that commands built by the repo need, free of any dependency (the
Makefile's ``help`` imports it through :mod:`scripts.reproduce` with a bare Python)."""

from __future__ import annotations

import re


def hydra_quoted(value: str) -> str:
    """``value`` as a quoted Hydra override value that Hydra reads back as ``value``: unquoted,
    Hydra's grammar refuses letters beyond ASCII (``é``) and splits at ``,`` ``=`` ``(`` and the
    like. Inside single quotes a backslash escapes only a quote, so a quote is escaped and the
    backslashes before it, or at the end, are doubled."""
    escaped = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", value)
    return "'" + re.sub(r"(\\+)$", lambda m: m.group(1) * 2, escaped) + "'"
