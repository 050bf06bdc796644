"""What MLflow holds: the sweep's parent run and one child run per trial, and what is read back.

Public names: ``tracker.SweepTracker`` (buffered, deduplicated, journaled MLflow writes that
survive an outage), ``callback.SweepCallback`` (Ray Tune's hooks -> the tracker),
``summary.summarize``/``arm_summaries`` (each trial's ``TrialSummary`` and its arms'
``ArmSummary``, computed by ``scalesweep.science.stats``; ``run`` prints them with
``scalesweep.dashboards.run_tables``), ``ui.serve``/``ui_hint``
(the MLflow UI and its saved views). Reads plan and spec; never launch.
"""
