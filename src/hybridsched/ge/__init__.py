"""Blocked Gaussian elimination on the cooperative scheduler (issue 11): the test systems
(`matrix`), numba block kernels (`kernels`), the `rows` and `tiles` solvers written once as
generators (`solvers`), one timed run (`runner`), a sweep (`sweep`) and the `/ge` HDF5
adapter (`output`)."""
