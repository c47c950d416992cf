"""Atomic file writes for the generic framework (`structure`, `studies`), which does not import
the rewrite engine (the engine has its own writer, `rewrite.serialize.write_bytes_atomic`)."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

__all__ = ["write_bytes_atomic"]


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically: temp file in the same folder, fsync, `os.replace`,
    then fsync the folder so the rename itself survives a crash.

    The file gets the permissions a plain ``open(path, "w")`` would give it: an existing file's
    mode is kept, a new file gets ``0o666`` minus the umask (and the folder's default ACL).

    Returns:
        The path written.

    Raises:
        OSError: If the folder does not exist or cannot be written; the error names ``path``,
            not the temporary file, and nothing is left behind.
    """
    path = Path(path)
    fd, tmp = _create_temp(path)
    try:
        with contextlib.suppress(OSError):  # keep the mode of the file being replaced
            os.fchmod(fd, stat.S_IMODE(os.stat(path).st_mode))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return path


def _create_temp(path: Path) -> tuple[int, str]:
    """Create ``.NAME.XXXXXXXX.tmp`` beside ``path`` with mode ``0o666`` (the kernel applies the
    umask, as for any new file; `tempfile.mkstemp` would force ``0o600``)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    flags |= getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as err:
            raise type(err)(err.errno, err.strerror, str(path)) from None
    raise FileExistsError(errno.EEXIST, "no free temporary file name beside it", str(path))
