"""Driver side of scalesweep, one sub-package per stage of the flow (docs/design.md §3.1):
``spec`` (what the user asked) → ``plan`` (what will run) → ``tracking`` (what MLflow holds) →
``launch`` (making it run: Ray, Tune, the trial driver) beside ``cluster`` (reaching a Ray
cluster: auth, shared storage, submit) → ``commands`` (one module per command); ``cli`` (the
parser, exit codes, ``main``) on top."""
