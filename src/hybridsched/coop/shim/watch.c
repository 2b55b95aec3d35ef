/* The watchdog's looks (coop/shimjob.py, _Watchdog), called through ctypes by the process
   that owns the jobs (coop/watchlook.py), never by the shim in a command. In C, and the
   sleeps between looks too, because the watchdog looks about once a bound for as long as
   the jobs run, on a CPU a holder wants: woken in Python for each look, the thread used
   6-9 ms of a CPU in a 1.45 s run of two co-located lock loops (~40 looks, a cold
   interpreter's ~0.2 ms each); with this loop, 1.4-1.9 ms, its start included
   (2026-12-07, docs/results/2core-unmodified.md). The act on what a look finds (a signal,
   a revoke under the arbiter's mutex) stays in Python: it is rare, and it needs /proc and
   the numba rules.

   The tables are read without the mutex, as the Python look did: a slot is copied once
   (another process may give it to another job meanwhile), and the act checks again under
   the mutex what it revokes. */
#include "coop.h"
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>

/* One token's holding as the watchdog last saw it (watchlook.py's SEEN_DTYPE). */
struct hs_watch_seen {
    int32_t slot;       /* the holder's slot, -1: none seen */
    int32_t signalled;  /* asked to rotate since `since` (set by the act) */
    int64_t acquired;   /* the holding's start, which tells one holding from the next */
    int64_t since;      /* when it counts from: its start, not before the last look with
                           waiters, and the last act on it */
};

/* A holding due for an act (watchlook.py's ACT_DTYPE). */
struct hs_watch_act {
    int32_t cpu, slot, job, pid, tid, signalled;
    int64_t acquired;
};

/* One look at the holders of the jobs marked in `watched` (njobs bytes, nonzero: this
   process's) while threads wait. `seen` has one entry per CPU and is carried from look to
   look; `*waited_at` is the last look that found threads waiting (-1: none). A holding
   first seen is dated from its start, but from no earlier than that look (before it,
   nobody may have waited); one dated `bound` or more ago goes to `act` (room for ncpu)
   and counts from now on. Returns how many went to `act`; `*due` is when the first
   holding seen reaches the bound (-1: none seen, or nobody waits). */
HS_EXPORT int hs_watch_look(const struct hs_header *h, const struct hs_cpu *cpus, int ncpu,
                            const struct hs_worker *workers, int nworkers,
                            const uint8_t *watched, int njobs, struct hs_watch_seen *seen,
                            int64_t now, int64_t bound, int64_t *waited_at, int64_t *due,
                            struct hs_watch_act *act)
{
    int n = 0;
    *due = -1;
    if (__atomic_load_n(&h->waiting, __ATOMIC_RELAXED) <= 0) {
        for (int ci = 0; ci < ncpu; ci++)
            seen[ci].slot = -1;
        *waited_at = -1;
        return 0;
    }
    int64_t floor = *waited_at < 0 ? now : *waited_at;
    *waited_at = now;
    int32_t holders[ncpu];
    for (int ci = 0; ci < ncpu; ci++)  /* before hi: a slot granted since is above it */
        holders[ci] = __atomic_load_n(&cpus[ci].holder, __ATOMIC_RELAXED);
    int hi = __atomic_load_n(&h->hi, __ATOMIC_ACQUIRE);
    if (hi > nworkers)
        hi = nworkers;
    for (int ci = 0; ci < ncpu; ci++) {
        struct hs_watch_seen *s = &seen[ci];
        int holder = holders[ci];
        if (holder < 0 || holder >= hi) {
            s->slot = -1;
            continue;
        }
        struct hs_worker w;
        memcpy(&w, (const void *)&workers[holder], sizeof w);
        if (w.job < 0 || w.job >= njobs || !watched[w.job] || !w.thread || w.state != HS_RUNNING) {
            s->slot = -1;
            continue;
        }
        if (s->slot != holder || s->acquired != w.acquired_ns)
            *s = (struct hs_watch_seen){holder, 0, w.acquired_ns,
                                        w.acquired_ns > floor ? w.acquired_ns : floor};
        if (now - s->since >= bound) {  /* at most one act per bound */
            act[n++] = (struct hs_watch_act){ci, holder, w.job, w.pid, w.tid, s->signalled,
                                             w.acquired_ns};
            s->since = now;
        }
    }
    for (int ci = 0; ci < ncpu; ci++)
        if (seen[ci].slot >= 0 && (*due < 0 || seen[ci].since + bound < *due))
            *due = seen[ci].since + bound;
    return n;
}

/* The watchdog's loop between two acts: sleeps `pause` ns, then looks (hs_watch_look, at
   the clock of the segment's times), and again when the first holding seen is due or, with
   none seen, a quantum on, until a look finds holdings due: returns how many (in `act`). A
   Python thread's wake-up for each look cost ~0.2 ms of a CPU, a cold interpreter's, where
   this loop's costs a few µs. Returns -1 as soon as the word `ctl` no longer holds `gen`
   (the caller's jobs changed, or it halts: it changes the word, then wakes it). */
HS_EXPORT int hs_watch_wait(const struct hs_header *h, const struct hs_cpu *cpus, int ncpu,
                            const struct hs_worker *workers, int nworkers,
                            const uint8_t *watched, int njobs, struct hs_watch_seen *seen,
                            int64_t pause, int64_t bound, int64_t quantum, int64_t *waited_at,
                            int64_t *due, struct hs_watch_act *act, int32_t *ctl, int32_t gen)
{
    for (;;) {
        if (pause > 0) {
            struct timespec ts = {pause / 1000000000LL, pause % 1000000000LL};
            hs_raw(SYS_futex, (long)ctl, FUTEX_WAIT, gen, (long)&ts, 0, 0);
        }
        if (__atomic_load_n(ctl, __ATOMIC_ACQUIRE) != gen)
            return -1;
        int64_t now = hs_now_ns();
        int n = hs_watch_look(h, cpus, ncpu, workers, nworkers, watched, njobs, seen, now, bound,
                              waited_at, due, act);
        if (n > 0)
            return n;
        pause = *due < 0 ? quantum : *due - now;
    }
}
