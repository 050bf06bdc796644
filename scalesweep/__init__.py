"""scalesweep: sweep world size x warmup x lr-scaling rule over Ray Train DDP workers, tracked in
MLflow, and say how fast each setting converges.

Three layers, imports pointing down only (docs/design.md §3):
``scalesweep.orchestrator`` (driver side: spec, plan, tracking, launch, CLI) ->
``scalesweep.dashboards`` (MLflow read back into tables, figures, the report) ->
``scalesweep.trainables`` (worker side: the loop, workloads, and the pure math of schedules,
scaling rules and convergence). One import namespace, so an environment that installs
scalesweep gets no top-level ``orchestrator``, ``trainables`` or ``dashboards`` of ours.
"""
