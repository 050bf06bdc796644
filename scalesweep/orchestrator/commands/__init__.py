"""The commands of ``scalesweep``, one module each: ``add_parser(sub)`` adds its arguments to
the CLI's parser, ``run(args)`` does it and returns the exit code. ``_common`` holds what
several share (the exit codes, ``run``'s arguments, the tracking URI, the end of a sweep).

Each module imports Ray, MLflow, matplotlib and ``dashboards`` only inside ``run``, so that
building the parser (every command's) stays cheap; this ``__init__`` imports nothing.
"""
