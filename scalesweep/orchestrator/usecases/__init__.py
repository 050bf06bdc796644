"""The use cases: what scalesweep does, defined once, below its two faces (the CLI's commands
and the Python API, docs/design.md §3.1). ``study`` (load, plan), ``run`` (run, resume, the
report), ``results`` (a study read back, the studies of a store), ``predict``, ``advise``,
``solve``.

Each takes typed records (a ``Study``, a tracking URI, numbers) and returns typed records or
DataFrames. None prints: progress goes to the caller's ``progress.Progress`` (logging by
default), and files are written only where the caller names them (a report's directory, a
summary JSON) or where a sweep keeps its own state (its sweep directory, which ``resume``
reads). Heavy imports (Ray, MLflow, pandas, ``dashboards``) happen inside the functions; this
``__init__`` imports nothing (docs/design.md §3.1, "Each sub-package's ``__init__.py``").
"""
