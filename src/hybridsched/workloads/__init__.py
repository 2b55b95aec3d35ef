"""Workloads: what the tasks are, what one costs, and how a run is verified.

``uniform`` is the paper's tensor (every frame the same cost); ``ramp``, ``skewed``,
``heavytail`` and ``varying`` give the same tensor an irregular cost per frame
(:mod:`.sorts`); ``mandelbrot`` computes bands of the Mandelbrot set (:mod:`.mandelbrot`).
Every task is reproducible from (seed, global task id) alone. :func:`build` makes the
workspace one run configuration needs: tensor, chunk kernel and verifier.
"""
