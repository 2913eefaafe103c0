"""How a subcommand writes its output file: whole or not at all, never over a file it was not asked to replace.

Every command that writes a file (``elmo embed``, ``elmo score -o``, ``elmo export-vectors``, ``elmo similar
--plot``) goes through [`writing`] (``elmo embed``'s several processes through its parts: [`start_output`],
[`publish`], [`finish_output`]):

1. [`check_output`], before anything heavy: not a folder, a folder that exists, not one of the command's inputs
   (the same file, also through a symbolic or hard link: that would destroy the input, even with ``--overwrite``),
   and not an existing file without ``--overwrite``.
2. A lock, ``.NAME.COMMAND.lock`` beside the output (``flock``: the system releases it when the process dies, even
   by SIGKILL): a second run of the same command to the same output stops at once.
3. The files that killed runs left for this output are deleted ([`remove_stale_partials`]).
4. The command writes under a hidden temporary name, ``.NAME.COMMAND-partial-PID.tmp``, in the output's folder.
5. [`publish`] gives the complete file the output's name: without ``--overwrite`` with ``os.link``, which fails
   if a file appeared at the output meanwhile (``os.replace`` would silently replace it).

A failure, Ctrl-C or SIGTERM ([`signals_unwind`] turns it into an exception) removes the temporary file; so the
output is either the complete new file or what was there before.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Iterator

from ..inference.hdf5_file import remove_file, temp_name
from .common import CliError, signals_unwind


def same_file(path: str, other: str) -> bool:
    """Whether two paths name one file (also through a symbolic or hard link); ``False`` if either is missing."""
    try:
        return os.path.samefile(path, other)
    except OSError:
        return False


def _is_stdin(path: str, output: str) -> bool:
    """Whether ``path`` is ``-`` (stdin) and stdin is the file ``output`` (``elmo score - -o in.txt < in.txt``)."""
    if path != "-":
        return False
    try:
        return os.path.samestat(os.fstat(0), os.stat(output))
    except (OSError, ValueError):
        return False


def check_output(output: str, overwrite: bool, inputs: Iterable[str] = (), flag: str = "--output") -> None:
    """[`CliError`] for an output that must not be written: a folder, one in a folder that does not exist, one of
    ``inputs`` (a path, or ``-`` for stdin), something other than a regular file (a device such as ``/dev/full``,
    a pipe: publishing renames a file over it), or an existing file without ``overwrite``. ``flag`` names the
    output in the messages."""
    if os.path.isdir(output):
        raise CliError(f"{flag} {output} is a folder; give a file name")
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise CliError(f"{flag} {output}: the folder {folder} does not exist")
    for path in inputs:
        if same_file(path, output) or _is_stdin(path, output):
            shown = "stdin" if path == "-" else path
            raise CliError(f"{flag} {output} is the input {shown}: writing it would destroy the input; choose another")
    if os.path.lexists(output) and not os.path.isfile(output):
        raise CliError(f"{flag} {output} exists and is not a regular file (a device, a pipe...); give a file name")
    if os.path.exists(output) and not overwrite:
        raise CliError(f"{output} exists; pass --overwrite to replace it")


def _lock_name(output: str, command: str) -> str:
    folder, name = os.path.split(os.path.abspath(output))
    return os.path.join(folder, f".{name}.{command}.lock")


def lock_output(output: str, command: str) -> int | None:
    """Lock ``output`` for this run of ``command``: an exclusive ``flock`` on ``.NAME.COMMAND.lock`` next to it, so
    that a second run to the same output fails at once ([`CliError`]), with or without ``--overwrite``. Returns
    the lock file's descriptor for [`unlock_output`] (``None`` where ``flock`` does not exist or the file system
    has no locks; [`publish`] still never replaces a file without ``--overwrite``)."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        return None
    path = _lock_name(output, command)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise CliError(
                f"{output} is being written by another `elmo {command}` (process {holder}); wait until it is done "
                "or choose another output"
            ) from None
        except OSError:
            os.close(fd)
            return None
        # The previous holder removes the lock file when done, maybe after we opened it: then we hold a lock
        # on a file that no longer has a name, which nobody else would see. Lock the file that is there now.
        try:
            current = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            current = False
        if current:
            with contextlib.suppress(OSError):  # the PID is only for the message above
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)


def unlock_output(output: str, command: str, fd: int | None) -> None:
    """Remove the lock file, then release the lock (in this order: see [`lock_output`])."""
    if fd is None:
        return
    remove_file(_lock_name(output, command))
    os.close(fd)


def partial_name(output: str, command: str, kind: str = "partial", suffix: str = "") -> str:
    """The hidden name this process writes ``output`` under: ``.NAME.COMMAND-KIND-PID.tmp`` beside it, then
    ``suffix`` (for writers that take the format from the extension: ``.png``)."""
    return temp_name(output, f"{command}-{kind}-{os.getpid()}") + suffix


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_partials(output: str, command: str, locked: bool = True, suffix: str = "") -> list[str]:
    """Delete what runs of ``command`` that died (SIGKILL, power loss) left next to ``output``; returns the paths.

    Only files provably left by the command are deleted: regular files of this user named
    ``.NAME.COMMAND-partial-PID.tmp`` or ``.NAME.COMMAND-merging-PID.tmp`` (then ``suffix``: see
    [`partial_name`]) for this very output, whose process
    ``PID`` is dead (or is this process, which has not created its own yet), and the files that a writer called on
    such a file made beside it (``..NAME.COMMAND-partial-PID.tmp.*``: its own temporary name); and, when this
    process holds the output's lock (``locked``: no other run to this output is writing), the part files
    ``.NAME.COMMAND-partN-of-W.tmp`` of a multi-process run, whose names carry no PID.
    """
    folder, name = os.path.split(os.path.abspath(output))
    marked = re.compile(
        rf"(?P<nested>\.)?\.{re.escape(name)}\.{re.escape(command)}-"
        rf"(?:(?:partial|merging)-(?P<pid>[0-9]+)|part[0-9]+-of-[0-9]+)\.tmp{re.escape(suffix)}(?(nested)\..+|)"
    )
    uid = os.getuid() if hasattr(os, "getuid") else None
    removed = []
    for entry in os.scandir(folder):
        match = marked.fullmatch(entry.name)
        if match is None or not entry.is_file(follow_symlinks=False):
            continue
        if match["pid"] is None:
            if not locked:
                continue
        elif int(match["pid"]) != os.getpid() and _pid_alive(int(match["pid"])):
            continue
        if uid is not None and entry.stat(follow_symlinks=False).st_uid != uid:
            continue
        remove_file(entry.path)
        removed.append(entry.path)
    return removed


def publish(temp: str, output: str, overwrite: bool) -> None:
    """Give the complete file ``temp`` the name ``output``. With ``overwrite`` it replaces whatever is there;
    without, it never replaces a file, even one that another program created while this run was writing
    ([`CliError`]; ``temp`` is then left for the caller to remove)."""
    if overwrite:
        os.replace(temp, output)
        return
    appeared = CliError(
        f"{output} was created by another program while this run was writing it; it was left as it is "
        "(pass --overwrite to replace it)"
    )
    try:
        os.link(temp, output)
    except FileExistsError:
        raise appeared from None
    except OSError:  # a file system without hard links: check, then rename (the lock keeps this command out)
        if os.path.exists(output):
            raise appeared from None
        os.replace(temp, output)
        return
    remove_file(temp)


def start_output(
    output: str, command: str, overwrite: bool, inputs: Iterable[str] = (), suffix: str = "", flag: str = "--output"
) -> int | None:
    """Lock ``output``, delete dead runs' partial files (named with ``suffix``), and check again, under the lock,
    that it may be written ([`check_output`], whose messages name ``flag``). Returns the lock for
    [`finish_output`]."""
    lock = lock_output(output, command)
    try:
        remove_stale_partials(output, command, locked=lock is not None, suffix=suffix)
        check_output(output, overwrite, inputs, flag)
    except BaseException:
        unlock_output(output, command, lock)
        raise
    return lock


def finish_output(output: str, command: str, lock: int | None) -> None:
    """Release what [`start_output`] took."""
    unlock_output(output, command, lock)


@contextlib.contextmanager
def writing(
    output: str,
    command: str,
    overwrite: bool,
    inputs: Iterable[str] = (),
    suffix: str = "",
    flag: str = "--output",
) -> Iterator[str]:
    """``with writing(output, "score", overwrite, inputs=[input]) as temp:`` write the file ``temp``; when the block
    ends without an error, ``temp`` becomes ``output`` ([`publish`]). An error, Ctrl-C or SIGTERM in the block (or
    at publishing) removes ``temp`` and leaves ``output`` as it was; SIGTERM then raises [`Terminated`]. ``suffix``
    ends the temporary name (see [`partial_name`]); ``flag`` names the output in messages. Errors: [`CliError`]
    (see [`check_output`], [`lock_output`], [`publish`]), and the block's own."""
    inputs = list(inputs)
    with signals_unwind():
        lock = start_output(output, command, overwrite, inputs, suffix, flag)
        try:
            temp = partial_name(output, command, suffix=suffix)
            try:
                yield temp
                publish(temp, output, overwrite)
            except BaseException:
                remove_file(temp)
                raise
        finally:
            finish_output(output, command, lock)
