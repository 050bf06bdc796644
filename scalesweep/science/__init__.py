"""The science of a sweep, pure: lr schedules, lr and warmup rules, batch arithmetic, batch
ramps, the gradient noise scale, and the statistics in ``stats``.

Nothing here imports torch, Ray or MLflow (tests/unit/test_layering.py checks every module in a
fresh interpreter), so the planner, the dashboards, the Tune driver and the workers share one
definition of each formula without paying for the others' imports.
"""
