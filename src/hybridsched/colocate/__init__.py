"""`hybridsched colocate`: J jobs started together on one node, the built-in workloads under
plain Linux, the cooperative arbiter (seed 001) or a CPU partition, or unmodified commands
(``--cmd``) under the policies of :mod:`cmdpolicy`; their makespan and interference."""
