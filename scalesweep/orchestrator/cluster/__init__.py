"""Reaching a Ray cluster: its auth token, whether its nodes share the sweep's storage, and
``scalesweep submit`` (what is uploaded, the probe of the head's Python, the job).

Public names: ``submit.submit`` (``scalesweep submit``) and ``submit.run_via_client``
(``run --address ray://``), ``upload`` (what ``submit`` ships), ``cluster_python`` (checks the
cluster's interpreter first, running ``cluster_probe`` there), ``storage_check``, ``ray_auth``.
Imports nothing, like every stage's ``__init__``.
"""
