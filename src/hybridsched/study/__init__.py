"""The study layer: what to run (:mod:`spec`), one timed run (:mod:`runner`) and a whole
study written run by run (:mod:`session`), for single-node and MPI runs alike."""
