"""Faults on purpose, at every point of a block: the k-th change the block makes to the file
system (a file opened for writing, a folder made, a rename, a link, a removal, a foreign call
such as ``renameat2``) fails with an OSError, as a full disk does, or ends the process at once,
as a kill does (no ``finally`` runs). Seen through Python's audit events, so no function of the
code under test is replaced."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

_CHANGES = {
    "os.mkdir", "os.rename", "os.replace", "os.link", "os.symlink", "os.remove", "os.rmdir",
    "os.truncate", "os.chmod", "shutil.copyfile", "shutil.rmtree", "ctypes.call_function",
}  # fmt: skip
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_armed: dict = {"on": False}
_installed = False


def _changes(event: str, args: tuple) -> bool:
    if event == "open":
        _, mode, flags = args
        return (
            any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & _WRITE_FLAGS)
        )
    return event in _CHANGES


def _hook(event: str, args: tuple) -> None:
    if not _armed["on"] or not _changes(event, args):
        return
    _armed["seen"] += 1
    if _armed["seen"] == _armed["at"] or (_armed["every"] and _armed["seen"] > _armed["at"]):
        _armed["on"] = _armed["every"]
        _armed["fault"](event)


def full_disk(event: str) -> None:
    raise OSError(errno.ENOSPC, f"No space left on device (at {event})")


def killed(event: str) -> None:
    os._exit(137)


@contextlib.contextmanager
def fault_at(
    k: int, fault: Callable[[str], None] = full_disk, every: bool = False
) -> Iterator[dict]:
    """Inside the block, the ``k``-th change to the file system calls ``fault`` instead of
    happening (and, with ``every``, each change after it: a file system gone read-only). Yields a record whose ``"seen"`` is the number of changes made so far: fewer
    than ``k`` after the block means the fault never came (the block ran to its end)."""
    global _installed
    if not _installed:  # an audit hook cannot be removed: one for the session, switched on here
        sys.addaudithook(_hook)
        _installed = True
    _armed.update(on=True, seen=0, at=k, fault=fault, every=every)
    try:
        yield _armed
    finally:
        _armed["on"] = False


def in_child(body: Callable[[], None]) -> int:
    """Run ``body`` in a forked copy of this process and return its exit status (137: killed by
    :func:`killed`); the copy never returns into the caller."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            body()
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def files_under(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by relative path, with its bytes ({} if there is none)."""
    if not folder.is_dir():
        return {}
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }
