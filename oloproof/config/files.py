"""Opening the files a project reads: regular files only.

``oloproof.yaml``, ``release.yaml``, the cases file, labels files, prefix files and their
sidecars are read whole (or line by line to their end). A named pipe would block the command
forever and a device such as ``/dev/zero`` never ends (the first release read one until the
kernel killed it), so anything that is not a regular file — directly or through a symlink —
is refused before it is read: exit code 2, one line naming the file. A symlink to a regular
file is read as that file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from oloproof.errors import InputError

__all__ = ["not_regular", "open_regular", "read_regular"]

_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def not_regular(path: Path, mode: int) -> str | None:
    """Why a file of ``mode`` cannot be read as a project file (``None``: a regular file).
    Folders are left to the callers (``IsADirectoryError``): each says it its own way."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "something else")
    link = f" (through a symlink to {os.path.realpath(path)})" if os.path.islink(path) else ""
    return (f"is not a regular file but {kind}{link}; Oloproof reads project files to their end, "
            "so save the content to a file first")


def open_regular(path: Path | str, label: str, error: type[InputError]) -> BinaryIO:
    """``path`` opened for reading in binary, refusing anything that is not a regular file
    with ``error(f"{label}: is a named pipe (FIFO)…")``. The mode is checked before the file is
    opened (opening a device can have effects) and again on the open descriptor, which is
    opened without blocking (a FIFO with no writer would block ``open`` itself).

    ``OSError`` (``FileNotFoundError``, ``IsADirectoryError`` for a folder, ``PermissionError``)
    is left to the caller, whose message names the kind of file."""
    path = Path(path)
    problem = not_regular(path, os.stat(path).st_mode)
    if problem:
        raise error(f"{label}: {problem}")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(21, "Is a directory", str(path))
        problem = not_regular(path, mode)  # replaced between the two checks
        if problem:
            raise error(f"{label}: {problem}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path | str, label: str, error: type[InputError]) -> bytes:
    """The whole content of the regular file ``path`` (see :func:`open_regular`)."""
    with open_regular(path, label, error) as fh:
        return fh.read()
