"""What Phalanx knows about this machine: its processes and their trees (procs, proctree), its
cores, memory and GPUs (limits), what each experiment holds of them (ledger), system metrics
(sysmetrics) and ports (ports). Standard library only, below every other room."""
