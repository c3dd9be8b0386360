"""Files written so that a kill, a full disk or a planted link cannot leave one half-written or
write somewhere else: a file is opened never through a symbolic link (:func:`open_new`,
:func:`open_existing`), replaced whole (:func:`write_whole`: written beside its name, then
renamed over it), and a folder of files is replaced as one (:func:`folder_as_one`)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from experiments.kit.errors import Busy, UnsafeFile

try:
    import fcntl
except ImportError:  # not a POSIX system: writers are not kept apart (written_alone)
    fcntl = None  # type: ignore[assignment]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# what open(2) says of a symbolic link under O_NOFOLLOW: ELOOP (Linux), EMLINK (FreeBSD)
_LINK_ERRORS = (errno.ELOOP, errno.EMLINK)


def _unsafe(path: Path) -> UnsafeFile:
    return UnsafeFile(
        f"{path} is a symbolic link or not a plain file: it is neither followed nor replaced; "
        "remove it (or use another run folder)"
    )


def refuse_link(path: Path) -> None:
    """An :class:`UnsafeFile` error if ``path`` is a symbolic link (a dangling one too)."""
    if path.is_symlink():
        raise _unsafe(path)


def special_file(path: str | Path) -> bool:
    """Whether ``path`` exists (through links) as neither a plain file nor a folder: a named pipe
    (reading one blocks until something writes to it), a socket or a device."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # gone, or a dangling link: reading it fails with a message of its own
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _checked(fd: int, path: Path, writing: bool) -> int:
    """``fd`` if it is a plain file (not a folder, device or pipe) and, for writing in place, no
    other name's file too (a planted hard link); else closed and refused."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (writing and st.st_nlink > 1):
        os.close(fd)
        raise _unsafe(path)
    return fd


def open_new(path: Path, mode: str = "w", **kwargs: Any) -> IO[Any]:
    """``path`` created anew for writing (``mode``: ``"w"`` or ``"wb"``), never through a
    symbolic link: a link there is refused; a plain file there (a temporary file a killed process
    left) is removed first."""
    refuse_link(path)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666)
    except FileExistsError:  # something was put there between the removal and the creation
        raise _unsafe(path) from None
    return os.fdopen(fd, mode, **kwargs)


def open_existing(path: Path, mode: str = "r", **kwargs: Any) -> IO[Any]:
    """``path`` opened to read (``"r"``, ``"rb"``), append (``"a"``: created if absent) or read
    and write in place (``"r+"``: created if absent), never through a symbolic link: a link, or
    anything but a plain file, is refused; so is, for writing, a file with another name too."""
    flags = {
        "r": os.O_RDONLY,
        "a": os.O_WRONLY | os.O_APPEND | os.O_CREAT,
        "r+": os.O_RDWR | os.O_CREAT,
    }[mode.replace("b", "")]
    try:
        fd = os.open(path, flags | _NOFOLLOW | _CLOEXEC, 0o666)
    except OSError as e:
        if e.errno in _LINK_ERRORS:
            raise _unsafe(path) from None
        raise
    return os.fdopen(_checked(fd, path, writing=mode[0] != "r" or "+" in mode), mode, **kwargs)


def write_whole(
    path: Path,
    write: Callable[[IO[Any]], None],
    mode: str = "w",
    tmp: Path | None = None,
    sync: bool = False,
    **kwargs: Any,
) -> None:
    """``write(file)`` into ``tmp`` (default ``path`` with the suffix ``.tmp``), then ``tmp``
    renamed over ``path``: a kill or an error meanwhile leaves the old ``path`` whole (an error
    removes ``tmp``). Neither name may be a symbolic link. With ``sync``, a power cut too: the
    bytes reach the disk before the rename (so the name never points at a file the disk holds
    only part of; a full disk some file systems report only then fails here, ``path`` as it
    was), and the rename itself once it is made (the folder synced)."""
    tmp = path.with_suffix(".tmp") if tmp is None else tmp
    refuse_link(path)
    try:
        with open_new(tmp, mode, **kwargs) as f:
            write(f)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        refuse_link(path)
        os.replace(tmp, path)
    except BaseException:
        if not tmp.is_symlink():
            tmp.unlink(missing_ok=True)
        raise
    if sync:
        sync_folder(path.parent)


def ends_whole(path: Path) -> bool:
    """Whether the file ``path`` is empty or ends with a newline: every line a CSV writer (or
    :func:`json.dump` with a newline after it) writes is ended, so a file that stops mid-line
    was cut short (a kill, a full disk)."""
    with path.open("rb") as f:
        if not f.seek(0, os.SEEK_END):
            return True
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def alive(pid: int) -> bool:
    """Whether process ``pid`` is running (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's
        return True
    return True


# -- a folder replaced as one --------------------------------------------------------------------
_STAGED = ".new-"  # a staged folder: .<name>.new-<pid> beside the folder <name> it replaces


def _exchange(a: Path, b: Path) -> bool:
    """Swap the folders ``a`` and ``b`` in one step (Linux's ``renameat2(RENAME_EXCHANGE)``);
    False where the system or the file system cannot."""
    if sys.platform != "linux":
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a C library without it
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    at_cwd, exchange = -100, 2  # AT_FDCWD, RENAME_EXCHANGE
    if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _replace_folder(staged: Path, target: Path) -> Path | None:
    """``staged`` put in ``target``'s place; returns where the old ``target`` now is (to remove),
    or None if there was none. One rename where the system can swap two folders; else two, and
    a kill between them leaves ``target`` absent, the old folder at ``<staged>.old`` and the new
    one at ``staged`` (the next :func:`folder_as_one` puts the new one in place)."""
    if not os.path.lexists(target):
        os.rename(staged, target)
        return None
    if _exchange(staged, target):
        return staged
    old = staged.with_name(staged.name + ".old")
    os.rename(target, old)
    try:
        os.rename(staged, target)
    except BaseException:
        os.rename(old, target)
        raise
    return old


def _clear_stale(target: Path) -> None:
    """Remove the staged folders of ``target`` that a killed process left; where it was killed
    between :func:`_replace_folder`'s two renames (``target`` absent, the old folder moved
    aside), the new folder is put in place first (it was complete: the renames come after every
    write), or, where it is gone too, the old one back."""
    stale = []
    for staged in target.parent.glob(f".{target.name}{_STAGED}*"):
        pid = staged.name.rpartition(_STAGED)[2].removesuffix(".old")
        if pid.isdigit() and not alive(int(pid)):
            stale.append(staged)
    for old in [p for p in stale if p.name.endswith(".old")]:
        new = old.with_name(old.name.removesuffix(".old"))
        if not os.path.lexists(target):
            os.rename(new if new.is_dir() else old, target)
    for staged in stale:
        if staged.is_dir() and not staged.is_symlink():
            shutil.rmtree(staged)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:  # a file system without hard links
        shutil.copy2(src, dst, follow_symlinks=False)


def _keep_others(old: Path, new: Path) -> None:
    """Every entry of ``old`` that ``new`` does not hold, put there too (files linked, not
    copied: they are never written again); a folder both hold, merged the same way."""
    with os.scandir(old) as scan:
        entries = list(scan)
    for entry in entries:
        dest = new / entry.name
        if entry.is_dir(follow_symlinks=False):
            if dest.is_dir() and not dest.is_symlink():
                _keep_others(Path(entry.path), dest)
            elif not os.path.lexists(dest):
                shutil.copytree(entry.path, dest, symlinks=True, copy_function=_link_or_copy)
        elif os.path.lexists(dest):
            continue
        elif entry.is_symlink():
            os.symlink(os.readlink(entry.path), dest)
        else:
            _link_or_copy(entry.path, str(dest))


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | _CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_folder(folder: Path) -> None:
    """The entries of ``folder`` (a rename into it) on the disk; a file system that cannot sync
    a folder is left to write it when it will (the files themselves are whole either way)."""
    with contextlib.suppress(OSError):
        _fsync(str(folder))


def _sync(folder: Path) -> None:
    """Every file under ``folder``, and the folders themselves, on the disk."""
    for root, _, names in os.walk(folder):
        for name in names:
            if not os.path.islink(path := os.path.join(root, name)):
                _fsync(path)
        _fsync(root)


@contextlib.contextmanager
def folder_as_one(target: Path) -> Iterator[Path]:
    """A new, empty folder to fill, put in ``target``'s place when the block ends without an
    error: a kill or an error at any point leaves ``target`` either as it was or as filled, never
    a mix. The entries of the old ``target`` the block does not write are kept. The folder is a
    hidden sibling of ``target`` (the same file system: one rename moves it); an error removes
    it, and one a killed process left is removed by the next call for the same ``target``."""
    if target.is_symlink():  # replace the folder it points at, not the link
        target = Path(os.path.realpath(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    _clear_stale(target)
    staged = target.with_name(f".{target.name}{_STAGED}{os.getpid()}")
    if staged.is_dir():  # this process's own, from an earlier call that failed to remove it
        shutil.rmtree(staged)
    staged.mkdir()
    try:
        yield staged
        _sync(staged)
        if target.is_dir():
            shutil.copymode(target, staged)
            _keep_others(target, staged)
        old = _replace_folder(staged, target)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    sync_folder(target.parent)  # the rename on the disk
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def written_alone(target: Path) -> Iterator[None]:
    """``target`` (a file or a folder) kept, while the block runs, from every other process
    that writes it through this function: each takes an exclusive lock on ``.<name>.lock``
    beside it first, and one that finds it held is refused at once (:class:`Busy`, naming the
    process that holds it), rather than let the last of two writers replace the other's work
    unseen. The lock ends with the block or with its process (a killed one too); its file, which
    names the last process that held it, stays (removed, a third writer could lock a new file
    beside the one a second holds)."""
    if fcntl is None:
        yield
        return
    real = Path(os.path.realpath(target))  # two names of one folder take one lock
    real.parent.mkdir(parents=True, exist_ok=True)
    lock = real.with_name(f".{real.name}.lock")
    with open_existing(lock, "r+") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = f.read().strip()
            who = f"process {holder}" if holder.isdigit() else "another process"
            raise Busy(f"{target} is being written by {who} (it holds {lock})") from None
        os.ftruncate(f.fileno(), 0)
        os.pwrite(f.fileno(), f"{os.getpid()}\n".encode(), 0)
        yield


def writable(path: Path) -> Path | None:
    """None if ``path`` (or, where it does not exist yet, its nearest existing parent) can be
    written; else that folder, for the message (a read-only file system, say)."""
    existing = next((p for p in [path, *path.parents] if p.exists()), Path("."))
    return None if os.access(existing, os.W_OK) else existing
