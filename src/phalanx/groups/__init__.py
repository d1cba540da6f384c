"""Experiment groups: hyperparameter search where every trial is a whole (distributed) experiment.

``spec.group`` reads the file; ``groups.records`` holds the group and trial values, which the
store keeps (``store.base.GroupStore``);
``groups.search`` turns the matrix into Optuna calls (imported only by the controller);
``groups.controller`` launches trials through `phalanx run --detach`, prunes and resumes.
"""
