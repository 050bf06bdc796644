"""Making it run: Ray started or joined, the plan handed to Ray Tune, trials driven, a sweep
resumed.

Public names: ``run.run_sweep``/``resume_sweep`` (the ``run`` and ``resume`` commands),
``tune.launch`` (the Tuner built from the plan), ``client_run.run_via_client`` (``run --address
ray://``: the run as one task on the head). What each Tune trial runs is
``scalesweep.trainables.trial_driver``. Reaching a cluster (auth, shared storage, ``submit``) is
``scalesweep.orchestrator.cluster``, below this stage. Imports nothing, like every stage's
``__init__``.
"""
