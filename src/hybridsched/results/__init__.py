"""Everything that reads a study file and never runs one: the data model (:mod:`data`),
the paper's metrics (:mod:`metrics`), ``report`` with its claims and plots, ``fit`` and
``merge``."""
