"""Services a team starts beside its experiments (docs/services.md): TensorBoard boards over what
Phalanx recorded, and the process each runs."""
