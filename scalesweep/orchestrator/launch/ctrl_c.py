"""Ctrl-C during a sweep: the first one stops it cleanly, the second at once; either way the
sweep is left for `scalesweep resume` (docs/cluster.md, "What survives what").

Ray Tune catches the first SIGINT itself and then returns from ``fit()`` as if the sweep had
ended, so every trial still running or not yet started would be closed as failed. Instead,
Tune's own handler is switched off (``TUNE_DISABLE_SIGINT_HANDLER``) and ours:

* on the first Ctrl-C marks the sweep interrupted (trials stopped by it are neither failed nor
  closed in MLflow; trials not started get no run) and asks Tune for its graceful stop through
  the SIGUSR1 handler Tune installs for exactly that while ``fit()`` runs;
* on the second raises KeyboardInterrupt at once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any


class CtrlC:
    def __init__(self, on_first: Callable[[], None] = lambda: None) -> None:
        self.on_first = on_first
        self.count = 0
        self._previous: Any = None

    @property
    def interrupted(self) -> bool:
        return self.count > 0

    def __enter__(self) -> CtrlC:
        os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
        if threading.current_thread() is threading.main_thread():  # signals reach only it
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count > 1:
            raise KeyboardInterrupt
        print("\nCtrl-C: stopping the sweep; trials stop at their last checkpoint and `scalesweep "
              "resume` finishes them (Ctrl-C again to stop at once)", file=sys.stderr, flush=True)
        self.on_first()
        tune_stop = signal.getsignal(signal.SIGUSR1) if hasattr(signal, "SIGUSR1") else None
        if callable(tune_stop):  # Tune's graceful stop, while fit() runs
            tune_stop(signal.SIGUSR1, frame)
        # Tune's handler puts back the SIGINT handler it found, which is this one
        signal.signal(signal.SIGINT, self._handle)
