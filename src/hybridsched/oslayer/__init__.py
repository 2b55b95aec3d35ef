"""The OS layer: mechanisms with no scheduling policy in them (CPUs and affinity, /proc,
shared memory, process teams, atomics, futexes). It imports nothing of hybridsched above
the error types, so every other layer may use it."""
