"""`hybridsched colocate`: J jobs started together on one node under plain Linux, the
cooperative arbiter (seed 001) or a CPU partition; their makespan and interference."""
