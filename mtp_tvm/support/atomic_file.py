"""Files and folders written atomically, so a reader (or a later run) never sees half of one and a failed write
leaves nothing behind: a file goes into a temp file with a name of its own beside its target (two writers of
one path never share one) and is renamed into place when complete; a folder is swapped in whole
(``replace_dir``).

What is at the output path is the user's and is respected: a symlink is written through (the file it points to
is replaced, the link stays), a FIFO or character device (``/dev/null``, a terminal) is written into directly,
and anything else that is not a regular file (a folder, a socket, a block device) is refused, never renamed
over. A writer killed with SIGKILL can leave its temp file (``.<name>.<kind>-<pid>-<random>``); the target is
then the old file or the new one, whole, and ``remove_stale`` removes the litter of processes that are gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import glob
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from ..support.errors import UsageError

NAME_MAX = 255  # the bytes of one file name on Linux's file systems
_TEMP_NAME_BYTES = 160  # of the target's name in a temp name: room for ``.<kind>-<pid>-<random>`` under NAME_MAX


def _temp_stem(name: str) -> str:
    """``name`` as temp names beside it spell it: itself, or when long, its start and a hash of it (a temp name
    of a legal 250-byte name must be legal too)."""
    raw = os.fsencode(name)
    if len(raw) <= _TEMP_NAME_BYTES:
        return name
    return os.fsdecode(raw[:_TEMP_NAME_BYTES - 11]).rstrip("\udcff") + "~" + hashlib.sha1(raw).hexdigest()[:10]


def temp_prefix(path: Path, kind: str = "tmp") -> str:
    """The start of a hidden temp name beside ``path`` that says who made it, ``.<name>.<kind>-<pid>-`` (mkstemp
    and mkdtemp add a random part)."""
    return f".{_temp_stem(path.name)}.{kind}-{os.getpid()}-"


def require_name_fits(path: str | os.PathLike, what: str) -> None:
    """Refuse in one line an output path whose name no file system here takes (over ``NAME_MAX`` bytes)."""
    size = len(os.fsencode(Path(path).name))
    if size > NAME_MAX:
        raise UsageError(f"cannot write {what}{path}: its name is {size} bytes, over the {NAME_MAX} a file name may "
                         "have")


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` then rename ``tmp`` to ``path`` (see the module docstring for special files); on failure
    or interrupt the temp file is removed and the error raised (callers that own a folder, like the dumps,
    report an ``OSError`` their way)."""
    path = Path(os.path.realpath(path))  # a symlink: replace what it points to, keep the link
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
            write(path)
            return
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        raise OSError(errno.EINVAL, "not a regular file, FIFO or character device; refusing to replace it",
                      str(path))
    fd, name = tempfile.mkstemp(prefix=temp_prefix(path), dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        # mkstemp makes 0600: give the file the mode ``open`` would, or the old file's
        os.chmod(tmp, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _umask() -> int:
    umask = os.umask(0)  # the only way to read it
    os.umask(umask)
    return umask


def make_temp_dir(prefix: str, parent: str | os.PathLike) -> Path:
    """A new folder of a name no other writer gets (``mkdtemp``) with the mode ``mkdir`` would give it, not
    mkdtemp's 0700: a folder renamed into place (an artifact, a reproducer) is readable by others under the usual
    umask 022, like every folder ``mkdir`` makes."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(path, 0o777 & ~_umask())
    return path


def remove_own_temps(prefix: str, parent: str | os.PathLike) -> None:
    """Remove what this process made in ``parent`` under ``prefix`` (a ``temp_prefix``: it names the pid). A
    ``finally`` cleans up by name, not by the path ``make_temp_dir`` returns: an interrupt (SIGTERM) can land
    after ``mkdtemp`` made the folder and before its path came back."""
    for path in Path(parent).glob(glob.escape(prefix) + "*"):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()


def write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_user_file(path: str | os.PathLike, write: Callable[[Path], None], what: str = "") -> None:
    """``atomic_write`` of a file the user named (a report, a plot, inputs): an error is one line,
    ``cannot write <what><path>: <reason>``."""
    try:
        atomic_write(path, write)
    except OSError as e:
        raise UsageError(f"cannot write {what}{path}: {e.strerror}") from None


def require_writable(path: str | os.PathLike | None, what: str, force: bool | None = None) -> None:
    """Refuse before any work a file path the user named for output that cannot be written: its folder missing,
    a folder at it; an existing regular file too when ``force`` is False (None: replacing one is the point)."""
    if path is None:
        return
    require_name_fits(path, f"{what} ")
    p = Path(path)
    try:
        if not p.resolve().parent.is_dir():
            raise UsageError(f"cannot write {what} {path}: {p.parent} is not a directory")
        if p.is_dir():
            raise UsageError(f"cannot write {what} {path}: Is a directory")
        existing = p.is_file()
    except OSError as e:  # a folder of the path too long or unreadable
        raise UsageError(f"cannot write {what} {path}: {e.strerror}") from None
    if force is False and existing:
        raise UsageError(f"{what} {path} already exists; pass --force to replace it")



def require_not_input(path: str | os.PathLike | None, what: str,
                      inputs: Iterable[tuple[str, str | os.PathLike | None]]) -> None:
    """Refuse an output path that is one of the files the command reads (``inputs``: what each is, its path; None:
    not given): the same file by its real path (a symlink on the way followed) or by its identity (a hard link
    of it, the same ``st_dev``/``st_ino``), so a write never replaces what it is made from."""
    if path is None:
        return
    real, ident = os.path.realpath(path), _identity(path)
    for role, given in inputs:
        if given is not None and (os.path.realpath(given) == real or ident is not None and _identity(given) == ident):
            raise UsageError(f"{what} {path} is {role} {given}, which this command reads; write elsewhere")


def _identity(path: str | os.PathLike) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:  # not there (yet): a new file is nobody's input
        return None
    return st.st_dev, st.st_ino

# ---- folders ----------------------------------------------------------------------------------------------

_AT_FDCWD, _RENAME_NOREPLACE, _RENAME_EXCHANGE = -100, 1, 2
_RENAMEAT2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """Linux ``renameat2``; False where the C library or the file system lacks it (the caller falls back)."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(err, os.strerror(err), str(dst))


def replace_dir(new: Path, dest: Path, replaceable: Callable[[Path], bool]) -> None:
    """Move the folder ``new`` to ``dest`` in one step. An existing ``dest`` is atomically swapped with ``new``
    (``RENAME_EXCHANGE``) and removed only if ``replaceable(it)``; otherwise it is swapped back and
    ``FileExistsError`` raised. ``dest`` is at every moment the old folder or the new one, and the one swapped
    out takes ``new``'s temporary name (removed here, or by ``remove_stale`` after a kill)."""
    try:
        if _renameat2(new, dest, _RENAME_NOREPLACE):
            return
    except OSError as e:
        if e.errno not in (errno.EEXIST, errno.ENOTEMPTY) or not _renameat2(new, dest, _RENAME_EXCHANGE):
            raise
        if not replaceable(new):
            _renameat2(new, dest, _RENAME_EXCHANGE)
            raise FileExistsError(errno.EEXIST, "it appeared meanwhile and may not be replaced", str(dest)) from None
        shutil.rmtree(new, ignore_errors=True)
        return
    # no renameat2 here: two renames, the old folder under ``new``'s name until it is removed
    if os.path.lexists(dest):
        if not replaceable(dest):
            raise FileExistsError(errno.EEXIST, "it appeared meanwhile and may not be replaced", str(dest))
        old = new.with_name(new.name + "-old")
        os.rename(dest, old)
        try:
            os.rename(new, dest)
        except BaseException:
            os.rename(old, dest)
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(new, dest)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale(path: Path, kind: str) -> list[Path]:
    """Remove the ``temp_prefix(path, kind)`` litter of processes that no longer run (killed writers)."""
    prefix, removed = f".{_temp_stem(path.name)}.{kind}-", []
    for p in path.parent.glob(f"{prefix}*") if path.parent.is_dir() else ():
        pid = p.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
    return removed
