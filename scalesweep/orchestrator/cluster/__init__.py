"""Reaching a Ray cluster: its auth token, whether its nodes share the sweep's storage, and
``scalesweep submit`` (what is uploaded, the probe of the head's Python, the job).

Public names: ``submit.submit`` (``scalesweep submit``), ``upload`` (what ``submit`` and
``run --address ray://``, in ``launch.client_run``, ship), ``cluster_python`` (checks the
cluster's interpreter first, running ``cluster_probe`` there), ``storage_check``, ``ray_auth``.
Imports nothing, like every stage's ``__init__``.
"""
