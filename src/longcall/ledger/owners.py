"""Proof that a lease holder's process on this host is gone: a lock its kernel drops (D1).

Owns the lock files by which a lease holder is proven dead, whatever holds the leases:
the tool server's task store (:mod:`longcall.server.store`) and the caller's ledger
(its workers, :mod:`longcall.runtime.claims`) both use it. Each lease-holding process
holds an exclusive ``flock`` on a file of its own, from before its first lease until it
stops, and the kernel drops that lock when the process is gone, however it goes (SIGKILL
and OOM kills included, since no code of the process has to run). A claimer that takes
a lease holder's lock without waiting knows that process is gone, and keeps the lock
until its claim commits, so the owner cannot come back in between. Must not: read a
store or ledger, a clock or the network; what an owner holds is the caller's question
(``holds_tasks``).

Only what this kernel can see is judged: an owner of another host (its id starts with
its host name), a lock file written under another boot (another kernel sharing the
directory, or a file from before a reboot on a shared file system), or a file that is
missing proves nothing, and the owner's lease decides (docs/design/server-task-store.md,
docs/design/leases-and-fencing.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import stat
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from longcall.errors import OwnerLockError

if sys.platform != "win32":
    import fcntl

logger = logging.getLogger(__name__)

BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")

HoldsTasks = Callable[[str], bool]
"""Whether an owner still holds an active task (its lock file is kept while it does)."""

SERVER_LOCKS = "task-store-owners"
"""The shared lock directory's name for a tool server's task store."""
WORKER_LOCKS = "ledger-workers"
"""The shared lock directory's name for a caller's ledger (its workers)."""


def boot_id() -> str:
    """This kernel's boot id (Linux), or "" where none is known (then the host name
    alone says that a lock file is this kernel's)."""
    try:
        return BOOT_ID_FILE.read_text().strip()
    except OSError:
        return ""


def shared_locks_dir(store_id: str, kind: str = SERVER_LOCKS) -> Path | None:
    """The lock directory for a store shared beyond one file (PostgreSQL): one per store
    id and ``kind`` (:data:`SERVER_LOCKS`, :data:`WORKER_LOCKS`), in this user's private
    directory under the temporary directory, so every lease-holding process of this user
    on this host finds the others' files there. None when that directory is not this
    user's alone (another user made it, or it is a link): then nothing is proven, and
    leases decide."""
    if sys.platform == "win32" or not store_id:
        return None
    base = Path(tempfile.gettempdir()) / f"longcall-{os.getuid()}"
    try:
        base.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(base)
    except OSError as exc:
        logger.warning("no dead-owner proofs: cannot make %s: %s", base, exc)
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        logger.warning("no dead-owner proofs: %s is not a private directory of this user", base)
        return None
    return base / kind / store_id


class OwnerLocks:
    """The lock files of one store's lease holders on this host, in ``directory``; an
    owner id starts with its host name, then ``separator``."""

    def __init__(self, directory: Path, *, separator: str = "/") -> None:
        self.directory = directory
        self.separator = separator
        self._boot = boot_id()
        self._host = socket.gethostname()
        self._own: tuple[int, Path] | None = None
        """This process's open, locked file (None until :meth:`hold`)."""
        self._proofs: dict[str, int] = {}
        """Dead owners' lock files held while their tasks are claimed."""

    def path_of(self, owner: str) -> Path:
        """The lock file of ``owner`` (named by a digest: owner ids hold slashes)."""
        name = hashlib.sha256(owner.encode()).hexdigest()[:32]
        return self.directory / f"{name}.lock"

    def hold(self, owner: str, holds_tasks: HoldsTasks) -> None:
        """Take ``owner``'s lock for as long as this process lives (or :meth:`close`);
        first sweep the files of dead owners that hold nothing any more."""
        if sys.platform == "win32" or self._own is not None:
            return  # no flock: nothing proves a death, leases decide alone
        self.sweep(holds_tasks)
        final = self.path_of(owner)
        # Locked and written under a name no sweep or proof looks at, then renamed: a
        # lock file is never seen unlocked while its process lives.
        staging = final.with_suffix(f".new-{os.getpid()}")
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise OwnerLockError(f"cannot make the lock file {final}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, f"{owner}\n{self._boot}\n".encode())
            os.rename(staging, final)
        except OSError as exc:
            os.close(fd)
            staging.unlink(missing_ok=True)
            raise OwnerLockError(f"cannot take the lock file {final}: {exc}") from exc
        self._own = (fd, final)

    def sweep(self, holds_tasks: HoldsTasks) -> None:
        """Remove the lock files of dead processes that hold no task any more."""
        with contextlib.suppress(FileNotFoundError):
            for path in self.directory.glob("*.lock"):
                fd = _try_lock(path)
                if fd is None:
                    continue
                try:
                    owner = _read_owner(path)
                    if owner is not None and not holds_tasks(owner):
                        path.unlink(missing_ok=True)
                finally:
                    os.close(fd)

    def prove_dead(self, owner: str) -> bool:
        """True only when ``owner``'s process is provably gone; its lock is then held
        until :meth:`done`. An owner of another host, or whose file is missing, held, or
        written under another boot, proves nothing."""
        if sys.platform == "win32" or owner.split(self.separator, 1)[0] != self._host:
            return False
        path = self.path_of(owner)
        fd = _try_lock(path)
        if fd is None:
            return False
        if _read_owner(path) != owner or _read_boot(path) != self._boot:
            os.close(fd)
            return False
        self._proofs[owner] = fd
        return True

    def done(self, owners: Sequence[str], holds_tasks: HoldsTasks, *, committed: bool) -> None:
        """After a claim's transaction: let the proven owners' locks go, deleting the
        files of those that hold no task any more (still locked by us, so the answer
        cannot change before the unlink; an owner with tasks left keeps its file, whose
        free lock proves its death again at the next claim round)."""
        for owner in owners:
            fd = self._proofs.pop(owner, None)
            try:
                if committed and not holds_tasks(owner):
                    self.path_of(owner).unlink(missing_ok=True)
            finally:
                if fd is not None:
                    os.close(fd)

    def close(self) -> None:
        """A clean stop: this process's lock file goes (a task it still holds then waits
        for its lease, the rule without a proof)."""
        own, self._own = self._own, None
        if own is not None:
            fd, path = own
            path.unlink(missing_ok=True)
            os.close(fd)
        for fd in self._proofs.values():
            os.close(fd)
        self._proofs.clear()
        with contextlib.suppress(OSError):
            self.directory.rmdir()  # the last process of the store on this host


def _try_lock(path: Path) -> int | None:
    """The open, exclusively locked ``path``, or None when another process holds its
    lock or it does not exist (nothing then proves its owner dead)."""
    if sys.platform == "win32":
        return None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def _read_owner(path: Path) -> str | None:
    lines = _lines(path)
    return lines[0] if lines and lines[0] else None


def _read_boot(path: Path) -> str:
    lines = _lines(path)
    return lines[1] if len(lines) > 1 else ""
