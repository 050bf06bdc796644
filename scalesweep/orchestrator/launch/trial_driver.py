"""The old home of :mod:`scalesweep.trainables.trial_driver`, kept as an alias of it."""

from __future__ import annotations

import sys

from scalesweep.trainables import trial_driver

# Why it stays: Ray pickles a function trainable by reference (module path and name), so Tune's
# registry, a Tuner.restore, or a Ray worker started before the move (issue 32 §2) may name
# this path; it must import as the very same module (tests/unit/test_trial_driver_alias.py).
sys.modules[__name__] = trial_driver
