"""Training workers that do not outlive the study process.

A study trains in worker processes. Killed alone (``kill PID``, a scheduler's signal to the main process),
the study process would leave its workers training the runs already handed to them; a study started again
then trains the same run into the same work folder while the orphan still writes there. On Linux each worker
asks the kernel for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``), which the trainer turns into a clean
stop; elsewhere nothing changes (stop a study with Ctrl-C, which reaches every process of its group).
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["stop_with_parent"]

_PR_SET_PDEATHSIG = 1


def stop_with_parent(parent_pid: int) -> None:
    """Worker initializer: SIGTERM to this process when ``parent_pid`` (the study process) exits."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl (an unusual libc): the worker lives as before
        return
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)
