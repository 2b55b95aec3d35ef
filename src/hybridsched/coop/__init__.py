"""Cooperative scheduling under oversubscription (SCHED_COOP on one node): a core arbiter
shared by every cooperating worker of every process, blocking-aware barriers, and
``hybridsched colocate`` to measure co-located jobs against plain Linux scheduling."""
