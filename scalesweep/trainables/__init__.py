"""Worker side of scalesweep: schedules, scaling rules, the DDP loop and workloads.

Kept import-light on purpose: the pure-math modules (``schedules``, ``scaling``,
``convergence``, ``batching``) import neither torch nor Ray, so the planner, the
dashboards and the tests can use them without paying for either.
"""
