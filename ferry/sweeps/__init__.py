"""Sweeps: hyperparameter searches whose trials are Ferry jobs, driven through Optuna.

``params.py`` reads the search space (``--param``, no Optuna import); ``study.py`` is
the Optuna side: the objective, the sampler and pruner, and the study kept in Ferry's
home.
"""
