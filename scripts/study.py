"""``bn-study NAME [OVERRIDES]``: a study of the registry (``experiments/studies.py``) run as
``python -m experiments.NAME [OVERRIDES]`` runs it (the module's ``cli``), from any folder, with
Hydra's tab completion of its settings:

    bn-study renorm setup=brn32 seed=1
    eval "$(bn-study renorm -sc install=bash)"     then   bn-study renorm setup=brn<TAB>

Hydra's completion asks the command itself, ``bn-study -sc query=bash``, with the line typed so far
in ``COMP_LINE``: the study is read from that line (its second word), and the line is handed on
without it, as ``python -m experiments.NAME`` would have seen it.
"""

from __future__ import annotations

import importlib
import os
import sys

from experiments.studies import TRAINING


def _completed_study(line: str) -> str | None:
    """The study named in a completion's ``COMP_LINE`` (``bn-study renorm setup=...``), with
    ``COMP_LINE`` set to the line without it; None while the study's name is being typed."""
    words = line.split()
    if len(words) < 2 or (len(words) == 2 and not line.endswith(" ")):
        return None
    os.environ["COMP_LINE"] = line.replace(f" {words[1]}", "", 1)
    if "COMP_POINT" in os.environ:
        os.environ["COMP_POINT"] = str(len(os.environ["COMP_LINE"]))
    return words[1]


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if (
        args[:1] == ["-sc"]
        and any(a.startswith("query=") for a in args)
        and "COMP_LINE" in os.environ
    ):
        name = _completed_study(os.environ["COMP_LINE"])
        if name is None:
            print(" ".join(TRAINING))
            return
    elif args and not args[0].startswith("-"):
        name, args = args[0], args[1:]
    else:
        raise SystemExit(f"usage: bn-study NAME [OVERRIDES], NAME one of: {', '.join(TRAINING)}")
    if name not in TRAINING:
        raise SystemExit(f"error: there is no study {name} (the studies: {', '.join(TRAINING)})")
    sys.argv = [sys.argv[0], *args]
    importlib.import_module(f"experiments.{name}").cli()


def cli() -> None:
    """The console command ``bn-study``."""
    main()


if __name__ == "__main__":
    cli()
