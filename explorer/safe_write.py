"""The one way Explorer writes a file a user named: never the input, never a surprise.

Every verb that writes (``report -o``, ``diff -o``, ``export``, ``view --screenshot``, the
collector, the store) goes through :func:`atomic_write`::

    atomic_write(target, lambda tmp: tmp.write_text(text), inputs=[trace_path], force=args.force)

It

* refuses to write over any of ``inputs`` — compared by device and inode, so a symlink, a
  ``..`` path or a hard link to the input is caught as well as the same spelling;
* refuses an existing file unless ``force`` (and even then never replaces something that is
  not a regular file: a FIFO, ``/dev/null``, a directory);
* has ``write`` fill a temporary file in the target's directory (hidden, named
  ``.explorer-tmp-*`` so that trace discovery never loads it), flushes it to disk and renames
  it onto the target — an interrupted write never leaves a half-written file under the name
  the user asked for, and without ``force`` the rename is a hard link that fails rather than
  replace a file that appeared meanwhile;
* turns every OS error (missing or read-only directory, a file where a directory should be,
  a name too long) into an :class:`~explorer.errors.OutputError`: one line, exit status 2.

:func:`check_target` runs the same checks without writing, so a verb can refuse a bad ``-o``
before a slow load.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from explorer.errors import OutputError, OutputExists

#: Hidden temporary files start with this; directory discovery skips every hidden file.
TEMP_PREFIX = ".explorer-tmp-"

PathLike = str | os.PathLike[str]


def _identity(path: PathLike) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def check_target(target: PathLike, *, inputs: Iterable[PathLike] = (), force: bool = False) -> Path:
    """The path to write (symlinks resolved), or :class:`OutputError` saying why not."""
    out = Path(target)
    if str(target) == "" or out.name in ("", ".", ".."):
        raise OutputError(target, "is not a file name", "give a file name such as report.txt")
    try:
        st = os.stat(out)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise cannot_write(out, exc) from None
    if st is not None:
        ident = (st.st_dev, st.st_ino)
        for src in inputs:
            if _identity(src) == ident:
                raise OutputError(
                    out,
                    f"this is the input trace ({src})",
                    "choose another output file; Explorer never overwrites what it reads",
                )
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(out, "is a directory", f"give a file name such as {out / 'out.json'}")
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(
                out,
                "exists and is not a regular file (a device, FIFO or socket)",
                "choose a regular file name",
            )
        if not force:
            raise OutputExists(out, "already exists", "pass --force to overwrite it")
        out = Path(os.path.realpath(out))  # replace the file a symlink points to, not the link
    parent = out.parent
    try:
        pst = os.stat(parent)
    except FileNotFoundError:
        raise OutputError(out, f"folder {parent} does not exist", "create it first") from None
    except OSError as exc:
        raise cannot_write(out, exc) from None
    if not stat.S_ISDIR(pst.st_mode):
        raise OutputError(out, f"{parent} is not a folder", "choose a path inside a folder")
    return out


def atomic_write(
    target: PathLike,
    write: Callable[[Path], object],
    *,
    inputs: Iterable[PathLike] = (),
    force: bool = False,
) -> Path:
    """Have ``write(tmp)`` write a temporary file beside ``target``, then rename it onto
    ``target``. Returns the path written. Raises :class:`OutputError` (one line) for every
    reason it cannot; the temporary file never outlives the call."""
    inputs = list(inputs)
    out = check_target(target, inputs=inputs, force=force)
    # The target's endings are kept (writers choose gzip by ``.gz``), not its (maybe long) stem.
    suffix = "".join(out.suffixes[-2:])[:24]
    tmp = out.parent / f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}{suffix}"
    try:
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            write(tmp)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            # Checked again just before the rename: the target may have changed meanwhile.
            out = check_target(out, inputs=inputs, force=force)
            if force:
                os.replace(tmp, out)
            else:
                _link_new(tmp, out)
        except OutputError:
            raise
        except OSError as exc:
            raise cannot_write(out, exc) from None
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    return out


def _link_new(tmp: Path, out: Path) -> None:
    """Give ``tmp`` the name ``out`` without ever replacing an existing file."""
    try:
        os.link(tmp, out)
    except FileExistsError:
        raise OutputExists(out, "already exists", "pass --force to overwrite it") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
            raise
        # A file system without hard links: the check-then-rename is the best it allows.
        if os.path.lexists(out):
            raise OutputExists(out, "already exists", "pass --force to overwrite it") from None
        os.replace(tmp, out)


#: What to do about an OS error writing a file, by its errno.
_FIXES = {
    errno.EACCES: "choose a folder you can write to",
    errno.EPERM: "choose a folder you can write to",
    errno.EROFS: "the file system is read-only; choose another folder",
    errno.ENOENT: "check that the folder exists",
    errno.ENOTDIR: "a file stands where a folder should be; check the path",
    errno.ENAMETOOLONG: "choose a shorter file name",
    errno.ENOSPC: "free some disk space or choose another folder",
    errno.EDQUOT: "free some disk space or choose another folder",
    errno.EFBIG: "the file is larger than this process may write (ulimit -f); raise the limit",
}


def cannot_write(out: Path, exc: OSError) -> OutputError:
    """``exc``, raised writing ``out`` (a file or a folder), as one line that names it and
    says what to do."""
    return OutputError(out, f"cannot write ({os_reason(exc)})", _FIXES.get(exc.errno or 0, ""))


def os_error_line(exc: OSError) -> str:
    """An OS error that reached the command line (a disk that filled up, a mount that went
    away) as one line: the file when known, the reason, and what to do when it is clear."""
    where = f"{exc.filename}: " if exc.filename else ""
    fix = _FIXES.get(exc.errno or 0, "")
    return f"{where}{os_reason(exc)}" + (f" — {fix}" if fix else "")


def os_reason(exc: OSError) -> str:
    """Why ``exc`` happened, in the system's words ("No space left on device"): Arrow's OS
    errors carry the errno and, as their ``strerror``, a long text around it."""
    if exc.errno:
        return os.strerror(exc.errno)
    return exc.strerror or str(exc)
