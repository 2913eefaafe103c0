"""New files beside an output, created here and never through a name that exists (issue 49).

A temporary name in a folder that others can write into may already be taken, say by a symbolic link planted at
the name a run will use (PIDs are guessable), pointing at a file outside the folder: ``open(NAME, "w")`` would
write through it. Every temporary file the package writes is opened by [`create_new`] (``O_CREAT | O_EXCL |
O_NOFOLLOW``: a name that exists, a link even to nowhere, is refused) or named by [`create_temp`] (a fresh,
unguessable name, retried while taken). A name that is taken by a link is then no file of the package's:
[`is_plain_file`] tells them apart.
"""

from __future__ import annotations

import os
import secrets
import stat
from typing import IO

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def create_new(path: str | os.PathLike, binary: bool = True, encoding: str = "utf-8") -> IO:
    """Open ``path`` for writing as a new regular file (mode 0o666 less the umask, as ``open`` gives).

    Raises:
        FileExistsError: something has the name: a file, a folder, a symbolic link (even a dangling one).
    """
    fd = os.open(path, _FLAGS, 0o666)
    try:
        return os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": encoding, "newline": ""}))
    except BaseException:
        os.close(fd)
        raise


def create_temp(folder: str | os.PathLike, prefix: str, suffix: str = ".tmp", binary: bool = True) -> tuple[IO, str]:
    """A new file ``PREFIX PID-RANDOM SUFFIX`` in ``folder`` (see [`create_new`]), opened for writing, and its path.
    The random part makes the name unguessable; a taken name is skipped, never written through."""
    for _ in range(100):
        path = os.path.join(folder, f"{prefix}{os.getpid()}-{secrets.token_hex(4)}{suffix}")
        try:
            return create_new(path, binary), path
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file {prefix}...{suffix} in {folder}: every name taken")


def is_plain_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a regular file itself, not a symbolic link (to one or to anything)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def what_is(path: str | os.PathLike) -> str:
    """``"a symbolic link to TARGET"``, ``"a folder"``, ``"a file"``..., for messages about a taken name."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "missing"
    if stat.S_ISLNK(mode):
        return f"a symbolic link to {os.readlink(path)}"
    return "a folder" if stat.S_ISDIR(mode) else "a file" if stat.S_ISREG(mode) else "a special file"


__all__ = ["create_new", "create_temp", "is_plain_file", "what_is"]
