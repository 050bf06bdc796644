"""The public module for workload authors: the interface a workload implements and the
registry that makes one (scalesweep.trainables.workloads, where the loop reads them; that path
keeps working). docs/workloads.md is the guide; examples/custom_workload.py a complete one.

>>> from scalesweep.workloads import Workload, WorkloadOptionError, make
>>> w = make("mlp_regression", {})
>>> isinstance(w, Workload), w.train_size() > 0
(True, True)
"""

from __future__ import annotations

from scalesweep.trainables.workloads import BUILTIN, Factory, UnknownWorkloadError, make, resolve
from scalesweep.trainables.workloads.base import Direction, Workload, WorkloadOptionError

__all__ = ["BUILTIN", "Direction", "Factory", "UnknownWorkloadError", "Workload", "WorkloadOptionError",
           "make", "resolve"]
