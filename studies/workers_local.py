"""Names of the processes that drive a study, and whether one of them died on this host.

A worker name is ``host:pid:token``: `worker_id` names one driving process (one
`Study.optimize` call), `manual_worker_id` the trials a process runs by hand (`Study.ask`).
`dead_local_worker` reads the pid back to tell a crashed driver on this host (gone, or a zombie
in ``/proc``) from a live one, so its trials are re-queued without waiting for the grace period.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

__all__ = ["dead_local_worker", "manual_worker_id", "never_dead", "worker_id"]


def worker_id() -> str:
    """``host:pid:token`` naming one driving process (one `optimize` call)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def manual_worker_id() -> str:
    """``host:pid:ask``: the worker of the trials this process runs by hand (`Study.ask`)."""
    return f"{socket.gethostname()}:{os.getpid()}:ask"


def never_dead(worker: str) -> bool:
    """The liveness check used when `StudySettings.reap_dead_local_workers` is off."""
    return False


def dead_local_worker(worker: str) -> bool:
    """Whether ``worker`` ran on this host in a process that no longer exists (or is a zombie)."""
    host, _, rest = worker.partition(":")
    pid_text, _, _token = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """Whether ``/proc/<pid>/stat`` shows state ``Z`` (False where it cannot be read)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False
