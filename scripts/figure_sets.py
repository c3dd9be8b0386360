"""A script's figures put in place as one set, and read as one: the files of a figure set are
staged beside their names (``.<name>.new-<token>``, the token the drawing process's id); once
every one is on the disk a journal (``.figure-set-<token>.commit``) says so, each is renamed over
its name, and the journal is removed. A kill between two renames leaves the journal, and the
next figure set or the next reader (:func:`settle`) puts the rest in place before anything else:
what is read is the old set or the new one, never a mix. Without matplotlib, for the readers
(the report, ``results/README.md``)."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from experiments.kit.errors import BadResults, Busy
from experiments.kit.files import alive, open_new, sync_folder

STAGED = ".new-"  # a figure drawn but not yet in place: .<name>.new-<token>


def staged(path: Path, token: str) -> Path:
    """Where the figure set ``token`` stages the file ``path``."""
    return path.with_name(f".{path.name}{STAGED}{token}")


def _journal(folder: Path, token: str) -> Path:
    """The record that the set ``token`` is being put in place: while it exists, every figure
    the set staged is complete and belongs in place."""
    return folder / f".figure-set-{token}.commit"


def _staged_files(folder: Path, token: str) -> list[Path]:
    return sorted(folder.glob(f".*{STAGED}{token}"))


def _put_in_place(folder: Path, token: str) -> None:
    """Every file the set ``token`` staged renamed over its name, then its journal removed;
    another process completing the same set at once takes some of the renames."""
    for file in _staged_files(folder, token):
        with contextlib.suppress(FileNotFoundError):
            os.replace(file, folder / file.name[1:].removesuffix(f"{STAGED}{token}"))
    _journal(folder, token).unlink(missing_ok=True)


def commit(folder: Path, token: str) -> None:
    """Every figure staged under ``token`` renamed over its old file (no writing: renames). A
    kill or an error between two renames leaves the journal and the staged files, and the next
    figure set or reader puts the rest in place."""
    files = _staged_files(folder, token)
    for file in files:  # on the disk before the journal says they are whole
        with open(file, "rb") as f:
            os.fsync(f.fileno())
    with open_new(_journal(folder, token), "w") as f:
        f.write("".join(f"{s.name}\n" for s in files))
        f.flush()
        os.fsync(f.fileno())
    sync_folder(folder)
    _put_in_place(folder, token)


def pending(folder: Path, token: str) -> bool:
    """Whether the set ``token`` began to put its figures in place and did not finish."""
    return _journal(folder, token).exists()


def discard(folder: Path, token: str) -> None:
    """What the set ``token`` staged, removed, unless its journal says they belong in place."""
    if pending(folder, token):
        return
    for file in _staged_files(folder, token):
        file.unlink(missing_ok=True)


def _pending(folder: Path) -> list[str]:
    return sorted(
        token
        for journal in folder.glob(".figure-set-*.commit")
        if (token := journal.name.removeprefix(".figure-set-").removesuffix(".commit")).isdigit()
    )


def _ended(token: str) -> bool:
    """Whether the process of the set ``token`` no longer puts its figures in place: it ended,
    or it is this one (which is not while it reads)."""
    return int(token) == os.getpid() or not alive(int(token))


def clear_stale(folder: Path) -> None:
    """What a figure set whose process ended left: its figures put in place where it ended while
    putting them in place (its journal is there: every one is whole), else removed."""
    for token in _pending(folder):
        if _ended(token):
            _put_in_place(folder, token)
    for file in folder.glob(f".*{STAGED}*"):
        token = file.name.rpartition(STAGED)[2]
        if token.isdigit() and _ended(token) and not pending(folder, token):
            file.unlink(missing_ok=True)


def settle(folder: Path, wait: float = 30.0) -> None:
    """Before reading the figures in ``folder``: every set a kill left half in place completed,
    and any set another process is putting in place waited for (renames: moments; ``wait``
    seconds at most), so that the figures read are one set, not a mix of an old and a new. A
    set that cannot be completed (a read-only folder) or does not end is one line."""
    deadline = time.monotonic() + wait
    while pending := _pending(folder) if folder.is_dir() else []:
        for token in [t for t in pending if _ended(t)]:
            try:
                _put_in_place(folder, token)
            except OSError as e:
                raise BadResults(
                    f"{folder} holds a figure set that process {token} left half in place, "
                    f"and it cannot be completed ({e.strerror or e}): run its figure script "
                    "again where the folder can be written"
                ) from None
        if any(not _ended(t) for t in pending):
            if time.monotonic() > deadline:
                live = next(t for t in pending if not _ended(t))
                raise Busy(
                    f"{folder} is being written: process {live} is putting a figure set in "
                    "place; read it again once that ends"
                )
            time.sleep(0.05)
