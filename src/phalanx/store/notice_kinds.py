"""What an experiment's supervisor notices while it lives, by name: a replica that made no progress
for its stall notice (phalanx.supervisor.liveness), a rank slower than the others' median by more
than the straggler threshold, and a run that has waited in this machine's queue longer than its
wait notice (phalanx.supervisor.notices). A hook's receiver gets each as ``experiment.`` and the
notice (``store.alert_records``). Names only: every supervisor and the lean writer read them, and
the alert hooks' records (``alert_records``) are only for a project that has hooks."""

from __future__ import annotations

STALLED, STRAGGLING, WAITING = "stalled", "straggling", "waiting"
NOTICES = (STALLED, STRAGGLING, WAITING)
