"""Experiment groups: hyperparameter search where every trial is a whole (distributed) experiment.

``spec.group`` reads the file; ``domain`` holds the group and trial values (``Group``, ``Trial``,
``GroupStatus``, ``TrialState``), which the store keeps (``store.base.GroupStore``);
``groups.core`` decides (a pure state machine: events in, operations out);
``groups.search`` turns the matrix into Optuna calls and opens the study (imported only by the core);
``groups.controller`` carries out the core's operations: launches trials, prunes, resumes;
``groups.setup`` checks, builds and records a group before it runs; ``groups.ending`` is `group stop`
and the group as JSON; ``groups.lock`` keeps one controller per group.
"""
