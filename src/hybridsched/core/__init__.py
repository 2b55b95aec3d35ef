"""Pure scheduling: the chunking policies, the dispensers that hand chunks to workers, the
LB4OMP techniques, the AIMD utilisation model and the registry that binds names to them.
Nothing here starts a thread or a process."""
