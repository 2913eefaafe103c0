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
4. The command writes under a hidden temporary name, ``.NAME.COMMAND-partial-PID.tmp``, in the output's folder,
   created as a new file (``O_EXCL``: never through a symbolic link planted at that name; one there is refused,
   [`check_temp_free`]).
5. [`publish`] gives the complete file the output's name: without ``--overwrite`` with ``os.link``, which fails
   if a file appeared at the output meanwhile (``os.replace`` would silently replace it).

A failure, Ctrl-C or SIGTERM ([`signals_unwind`] turns it into an exception) removes the temporary file; so the
output is either the complete new file or what was there before.

An output that is a symbolic link to a regular file is published at the file it points to: the link stays. One
that is a character device or a pipe (``/dev/stdout``, ``/dev/null``, a FIFO), or a symbolic link to one, is
written through, never replaced: the command writes a temporary file in the system's temporary folder, then copies
it into the device or pipe ([`writes_through`]). A block device (a disk), a socket or a dangling link is refused.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator

from ..inference.hdf5_file import remove_file, temp_name
from ..inference.new_files import what_is
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


def writes_through(output: str) -> bool:
    """Whether ``output`` is a character device or a pipe (``/dev/stdout``, ``/dev/null``, a FIFO), or a symbolic
    link to one: written through (opened and written), never replaced by a file."""
    try:
        mode = os.stat(output).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def published_path(output: str) -> str:
    """Where the file ``output`` is published: the regular file that a symbolic link points to (so that the link
    stays a link), else ``output`` itself."""
    if os.path.islink(output) and os.path.isfile(output):
        target = os.path.realpath(output)
        if same_file(target, output):  # (a link of /proc to a deleted file resolves to a name that is not it)
            return target
    return output


def model_files(model: str | None) -> list[str]:
    """The files of the model a command reads (a local folder, or the bundled demo model for ``None``): inputs too,
    which an output must not replace."""
    if model is None:
        from ..demo_models.model import demo_model_path

        model = str(demo_model_path())
    if not os.path.isdir(model):
        return [model] if os.path.isfile(model) else []
    return [entry.path for entry in os.scandir(model) if entry.is_file()]


def check_output(output: str, overwrite: bool, inputs: Iterable[str] = (), flag: str = "--output") -> None:
    """[`CliError`] for an output that must not be written: a folder, one in a folder that does not exist, one of
    ``inputs`` (a path, or ``-`` for stdin; also the model's files, see [`model_files`]), a block device, a
    socket or a dangling symbolic link, or an existing file without ``overwrite``. A character device or a pipe
    (or a link to one) is written through ([`writes_through`]: no ``overwrite`` needed). ``flag`` names the output
    in the messages."""
    if os.path.isdir(output):
        raise CliError(f"{flag} {output} is a folder; give a file name")
    if output.endswith(tuple(filter(None, (os.sep, os.altsep)))):  # the system would say "Not a directory"
        raise CliError(f"{flag} {output} ends with {output[-1]!r}, as a folder's name does; give a file name")
    if os.path.islink(output) and not os.path.exists(output):
        raise CliError(
            f"{flag} {output} is a symbolic link to {os.readlink(output)}, which does not exist; give a file name"
        )
    folder = os.path.dirname(os.path.abspath(published_path(output)))
    if not os.path.isdir(folder):
        raise CliError(f"{flag} {output}: the folder {folder} does not exist")
    if writes_through(output):  # written into, not replaced: reading a terminal or pipe that is written is no loss
        return
    for path in inputs:
        if same_file(path, output) or _is_stdin(path, output):
            shown = "stdin" if path == "-" else path
            raise CliError(f"{flag} {output} is the input {shown}: writing it would destroy the input; choose another")
    if os.path.lexists(output) and not os.path.isfile(output):
        raise CliError(
            f"{flag} {output} exists and is not a regular file, a character device or a pipe (a disk, a socket); "
            "give a file name"
        )
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
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as err:
            what = "a folder" if os.path.isdir(path) else "a symbolic link" if os.path.islink(path) else None
            if what is not None:
                raise CliError(
                    f"{path}, the lock this command takes beside {output}, is {what}: it is no file of the command; "
                    "move it away, or choose another output"
                ) from None
            raise CliError(f"cannot create the lock {path} beside {output}: {err.strerror or err}") from None
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


def check_temp_free(temp: str, output: str) -> None:
    """[`CliError`] if something has the temporary name ``temp`` after [`remove_stale_partials`]: a symbolic link
    (planted, maybe, at a guessable name, to a file outside the folder), a folder, or a file that is not one a dead
    run of the command left. The writers create ``temp`` as a new file (``O_EXCL``), never through a link."""
    if os.path.lexists(temp):
        raise CliError(
            f"{temp}, the temporary name this command writes {output} under, is taken ({what_is(temp)}): it is no "
            "file of the command's; move it away, or choose another output"
        )


def write_into(temp: str, output: str) -> None:
    """Copy the complete file ``temp`` into the device or pipe ``output`` (see [`writes_through`])."""
    try:
        with open(temp, "rb") as source, open(output, "wb") as target:
            shutil.copyfileobj(source, target, 1 << 20)
    except OSError as err:
        raise CliError(f"could not write {output}: {err.strerror or err}") from None


def publish(temp: str, output: str, overwrite: bool) -> None:
    """Give the complete file ``temp`` the name ``output``. With ``overwrite`` it replaces whatever is there;
    without, it never replaces a file, even one that another program created while this run was writing
    ([`CliError`]; ``temp`` is then left for the caller to remove). A device or pipe is written into ([`write_into`];
    ``temp`` is removed), a symbolic link to a file publishes at that file ([`published_path`])."""
    if writes_through(output):
        write_into(temp, output)
        remove_file(temp)
        return
    output = published_path(output)
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
        if writes_through(output):  # nothing to lock or replace: a temporary file, copied in when complete
            check_output(output, overwrite, inputs, flag)
            folder = tempfile.mkdtemp(prefix=f"elmo-{command}-")  # the writer may put its own files beside
            try:
                temp = os.path.join(folder, "output.tmp" + suffix)
                yield temp
                write_into(temp, output)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            return
        output = published_path(output)
        lock = start_output(output, command, overwrite, inputs, suffix, flag)
        try:
            temp = partial_name(output, command, suffix=suffix)
            check_temp_free(temp, output)
            try:
                yield temp
                publish(temp, output, overwrite)
            except BaseException:
                remove_file(temp)
                raise
        finally:
            finish_output(output, command, lock)
