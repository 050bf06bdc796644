"""Adapters for training frameworks that own their loop (docs/workloads.md, "Hugging Face
Trainer" and "Lightning"): each takes a trial's ``config`` (``scalesweep.loop_helpers``) to
the framework's own settings, scheduler and callback.

Each adapter is a module of its own that imports its framework (an optional extra:
``pip install 'scalesweep[hf]'`` or ``'scalesweep[lightning]'``) when it is imported; this
package imports neither.
"""
