"""The generated documents' last step (``results/CLAIMS.md``, ``report.html``, ``README.md``),
shared by their command lines."""

from __future__ import annotations

import sys
from pathlib import Path

from experiments.kit.files import write_whole


def write_document(out: Path, text: str) -> None:
    """``text`` into ``out``, whole (written beside it, then renamed over it), and a line that
    says so; a disk that refuses it ends the command in one line, ``out`` as it was."""
    try:
        write_whole(out, lambda f: f.write(text), tmp=out.with_name(f".{out.name}.tmp"))
    except OSError as e:
        sys.exit(f"error: {out} could not be written ({e.strerror or e}); it is as it was")
    print(f"wrote {out}")
