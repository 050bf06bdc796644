"""What will run: the spec expanded into one row per trial, before anything starts.

Public names: ``rows.make_plan`` (a ``Sweep`` and the cluster -> ``rows.Plan`` of ``PlanRow``\\ s
with each trial's resolved lr, warmup, batch and arm), ``table.format_plan`` (what ``scalesweep
plan`` prints), ``cluster.local_cluster``/``connected_cluster`` (what the plan may use),
``lr_preview.preview`` (``scalesweep lr``). Reads ``scalesweep.orchestrator.spec``; never tracking or launch.
"""
