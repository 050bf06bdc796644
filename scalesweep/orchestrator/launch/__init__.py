"""Making it run: Ray started or joined, the plan handed to Ray Tune, trials driven, a sweep
resumed.

Public names: ``run.run_sweep``/``resume_sweep`` (the ``run`` and ``resume`` commands),
``tune.launch`` (the Tuner built from the plan), ``trial_driver.trainable`` (the function every
Tune trial process imports: kept light, so this ``__init__`` imports nothing). Reaching a
cluster (auth, shared storage, ``submit``) is ``scalesweep.orchestrator.cluster``.
"""
