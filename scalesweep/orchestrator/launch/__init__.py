"""Making it run: Ray started or joined, the plan handed to Ray Tune, trials driven, a sweep
resumed.

Public names: ``run.run_sweep``/``resume_sweep`` (the ``run`` and ``resume`` commands),
``tune.launch`` (the Tuner built from the plan). What each Tune trial runs is
``scalesweep.trainables.trial_driver``; ``trial_driver`` here is its old path, an alias that a
sweep started before the move still imports, so this ``__init__`` imports nothing. Reaching a
cluster (auth, shared storage, ``submit``) is ``scalesweep.orchestrator.cluster``.
"""
