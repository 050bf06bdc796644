"""What the user asked: the sweep file read, layered over its recipe, and checked.

Public names: ``load.load_sweep`` (a path and ``--set`` overrides -> ``load.Sweep``, or an
``errors.InputError`` listing every problem), ``schema.SweepSpec`` (the file's shape),
``recipes.read_recipe`` (a WeNet or DeepSpeed training config as its framework reads it),
``errors.Problem``/``errors.InputError`` (field, value, rule; exit code 2).
Imports nothing above it: plan, tracking and launch read the spec, never the reverse.
"""
