"""The Ray Train side of a ``ddp`` trial: the function each worker runs (``ray_worker``), Ray
Train's ``TorchTrainer`` without the helpers a trial never uses (``lean_trainer``), and the
hand-off of its results to Tune at a trial's end (``tune_handover``). The trial driver
(``trainables/trial_driver.py``) puts them together. Imports nothing.
"""
