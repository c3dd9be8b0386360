"""A Hydra sweeper that searches a study's settings with Optuna (``hydra/sweeper=search``)."""
