"""Making it run: Ray started or joined, the plan handed to Ray Tune, trials driven, a sweep
resumed, or a job submitted to a cluster.

Public names: ``run.run_sweep``/``resume_sweep`` (the ``run`` and ``resume`` commands),
``tune.launch`` (the Tuner built from the plan), ``trial_driver.trainable`` (the function every
Tune trial process imports: kept light, so this ``__init__`` imports nothing),
``submit.submit`` (``scalesweep submit``; ``cluster_python`` checks the cluster's interpreter
first, running ``cluster_probe`` there), ``storage_check``, ``ray_auth``.
"""
