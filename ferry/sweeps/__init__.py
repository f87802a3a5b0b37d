"""Sweeps: hyperparameter searches whose trials are Ferry jobs, driven through Optuna.

``params.py`` reads the search space (``--param``, no Optuna import); ``study.py`` is
the Optuna side: the objective, the sampler and pruner, and the study kept in Ferry's
home; ``driver.py`` runs a sweep: trials as jobs, their reports to the pruner, its
cancel and its cost cap. The commands are ``ferry.cli.sweep_cmd`` (and ``sweep_plot``).
"""
