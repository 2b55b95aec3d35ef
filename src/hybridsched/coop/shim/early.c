/* A spin for the job's own threads (HS_EARLY_NS in coop.h): while a thread waits for a token,
   the job's first waiting thread looks at the job's holders every HS_EARLY_NS and asks one
   that has run that long without entering the shim (each worker counts its entries, the
   segment's `entries`) to rotate, with the rotation signal the watchdog uses; at holders
   that do enter it (a lock loop) it looks less and less often (HS_EARLY_MAX_NS). And a
   gang look (HS_GANG_MIN_NS), by a waiter whose own process's signaller of a condition
   variable runs outside the shim: it asks a holder of another process of the job for its
   token, for the process to run whole. */
#include "coop.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

/* the CPU time of thread `tid` of process `pid`, -1 if it cannot be read: this process's
   from the kernel's per-thread clock (by the system call through libc: the vDSO's
   fallback for such a clock is a system call outside libc, which would trap), another
   process's from /proc (the per-thread clocks of other processes cannot be read) */
static int64_t thread_cpu_ns(int pid, int tid)
{
    if (pid == hs_self_pid()) {
        struct timespec ts;
        clockid_t clock = (clockid_t)((~(unsigned)tid << 3) | 6);  /* CPUCLOCK_PERTHREAD | SCHED */
        if (hs_raw(SYS_clock_gettime, clock, (long)&ts, 0, 0, 0, 0) != 0)
            return -1;
        return ts.tv_sec * 1000000000LL + ts.tv_nsec;
    }
    char buf[96];
    if (hs_task_file(pid, tid, "schedstat", buf, sizeof buf) <= 0)
        return -1;
    return strtoll(buf, NULL, 10);  /* the first field: time on a CPU, ns */
}

/* the thread of this job other than `me` that has waited longest for a token, or -1 */
static int first_sibling(int me)
{
    int first = -1;
    int64_t seq = INT64_MAX;
    for (int w = 0; w < hs_v.h->hi; w++) {
        struct hs_worker *r = &hs_v.workers[w];
        if (w != me && r->used == 1 && r->job == hs_job && hs_ld(&r->state) == HS_WAITING
            && r->seq < seq) {
            first = w;
            seq = r->seq;
        }
    }
    return first;
}

/* whether `me` is the first of its job's threads to wait for a token (the one that looks
   after the early rotations) */
static int first_sibling_waiting(int me)
{
    int f = first_sibling(me);
    return f < 0 || hs_v.workers[f].seq >= hs_v.workers[me].seq;
}

int hs_sibling_waiting(int me)
{
    return first_sibling(me) >= 0;
}

/* the rotation signal, queued to thread `tid` of process `pid` with its job's key as the
   cookie (hs_nudge_is_ours) */
void hs_nudge(int pid, int tid, int64_t key)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    si.si_signo = hs_nudge_signal();
    si.si_code = SI_QUEUE;
    si.si_pid = hs_self_pid();
    si.si_uid = getuid();
    si.si_value.sival_ptr = (void *)(intptr_t)key;
    hs_raw(SYS_rt_tgsigqueueinfo, pid, tid, si.si_signo, (long)&si, 0, 0);
}

/* The job's first waiting thread looks at up to HS_EARLY_TRACK of the job's holders (see
   HS_EARLY_NS): one that has held its token since the last look, HS_EARLY_NS or more, and run
   for half of that at least (not a holder the system preempted) without entering the
   shim is asked to rotate, once per holding. Returns when to look again: 0 for the other
   waiters (they sleep: only the first acts, and the first, once granted, wakes the next
   to take the looks over: hs_early_hand_over); HS_EARLY_MAX_NS for the first while the
   job holds no token (one of its threads may take a free one and spin); `*every` doubled
   (up to HS_EARLY_MAX_NS) when every holder entered the shim since the last look, or
   has not run for HS_EARLY_STILL_NS (asleep in a call the shim does not see, or
   preempted: no spin to catch; then up to HS_EARLY_STILL_MAX_NS only: looking every
   HS_EARLY_NS at a holder asleep took 2-3 % of a CPU for as long as it slept, forever
   once the jobs' owner, and its watchdog, had died), HS_EARLY_NS otherwise;
   HS_EARLY_BUSY_NS at once (then doubled) when each of them entered it HS_EARLY_BUSY
   times or more (a lock loop). */
static const struct hs_early unseen = {-1, 0, 0, -1, 0, 0};

int64_t hs_early_look(int me, struct hs_early e[HS_EARLY_TRACK], int64_t *every, int64_t now)
{
    struct hs_early seen[HS_EARLY_TRACK];
    int n = 0, calm = 1, busy = 1, still = 0, traced = 0, first = first_sibling_waiting(me);
    if (first) {
        for (int ci = 0; ci < hs_v.ncpu && n < HS_EARLY_TRACK; ci++) {
            int h = hs_v.cpus[ci].holder;
            if (h < 0 || h == me)
                continue;
            struct hs_worker *r = &hs_v.workers[h];
            if (r->used != 1 || r->job != hs_job || !r->thread || hs_ld(&r->state) != HS_RUNNING)
                continue;
            struct hs_early *s = &seen[n++];
            *s = (struct hs_early){h, __atomic_load_n(&r->entries, __ATOMIC_RELAXED), r->acquired_ns,
                                thread_cpu_ns(r->pid, r->tid), 0, now};
            int entered = 0, quiet = 0;  /* seen at the last look, in the shim since; or
                                            not, and not running either */
            for (int i = 0; i < HS_EARLY_TRACK; i++) {
                struct hs_early *was = &e[i];
                if (was->slot != h || was->since != s->since)
                    continue;
                s->asked = was->asked;
                uint32_t calls = (uint32_t)s->entries - (uint32_t)was->entries;
                entered = calls != 0;
                busy = busy && calls >= HS_EARLY_BUSY;
                int known = was->cpu_ns >= 0 && s->cpu_ns >= 0;
                int ran = known && s->cpu_ns - was->cpu_ns >= HS_EARLY_NS / 2;
                if (known && s->cpu_ns == was->cpu_ns) {
                    s->moved = was->moved;
                    traced = traced || hs_traced(r->pid, r->tid);
                }
                quiet = known && !entered && now - s->moved >= HS_EARLY_STILL_NS;
                if (!was->asked && !entered && now - s->since >= HS_EARLY_NS && ran) {
                    hs_nudge(r->pid, r->tid, hs_job_key());
                    s->asked = 1;
                }
                break;
            }
            calm = calm && (entered || quiet);
            still = still || quiet;
        }
    }
    for (int i = 0; i < HS_EARLY_TRACK; i++)
        e[i] = i < n ? seen[i] : unseen;
    /* a holder stopped by its tracer (strace -f stops each system call), whose tracer in
       this job may be the very thread waiting: its token taken back now, not at the scan's
       period (strace -f of a pipeline on one CPU: 1.6 s, 0.2 s at a few of its stops) */
    if (traced)
        hs_reclaim_now();
    if (n == 0)
        return first ? HS_EARLY_MAX_NS : 0;
    int64_t most = still ? HS_EARLY_STILL_MAX_NS : HS_EARLY_MAX_NS;
    *every = !calm ? HS_EARLY_NS
           : busy && *every < HS_EARLY_BUSY_NS ? HS_EARLY_BUSY_NS
           : 2 * *every < most ? 2 * *every : most;
    return *every;
}

/* A waiter of the job granted its token: the job's next waiter, if any, is woken to take
   the looks over, since the first one looks alone and the others sleep until their grant
   or the reclaim scan. Without it, a command of several processes whose holders spin for
   threads of another of its processes (numpy in forked workers, each with an OpenBLAS
   pool) had no one looking once its first waiter was granted, each such holder kept until
   the watchdog's bound: two such commands of 3 processes each took 7-8x as long as now
   (2026-12-06, docs/results/2core-unmodified.md). The wake costs the granted thread a
   scan of the slots and, when a sibling waits, one system call. */
void hs_early_hand_over(int me)
{
    int next = first_sibling(me);
    if (next >= 0)  /* its word unchanged: it finds itself still waiting, and looks */
        hs_raw(SYS_futex, (long)&hs_v.wake[next], FUTEX_WAKE, 1, 0, 0, 0);
}

int hs_last_signaller = -1;

/* whether the sibling that last signalled a condition variable of this process holds a
   token and has stayed out of the shim since `g->sib_seen`; starts watching it anew when
   it changed */
static int signaller_quiet(int me, struct hs_gang *g, int64_t now)
{
    int sib = __atomic_load_n(&hs_last_signaller, __ATOMIC_RELAXED);
    if (sib < 0 || sib == me || sib >= hs_v.nworkers) {
        g->sib = -1;
        return 0;
    }
    struct hs_worker *s = &hs_v.workers[sib];
    if (s->used != 1 || s->pid != hs_v.workers[me].pid || hs_ld(&s->state) != HS_RUNNING) {
        g->sib = -1;
        return 0;
    }
    int32_t entries = __atomic_load_n(&s->entries, __ATOMIC_RELAXED);
    if (g->sib != sib || g->sib_entries != entries) {
        g->sib = sib;
        g->sib_entries = entries;
        g->sib_seen = now;
    }
    return 1;
}

/* The gang look (HS_GANG_MIN_NS): by a waiter `me` just woken from an untimed
   condition-variable wait (wait_token asks only then) whose process's last signaller of a
   condition variable runs with a token and has not entered the shim for HS_GANG_MIN_NS.
   The holder asked is the one of another process of the job that has held its token
   longest, HS_GANG_MIN_NS at least, when its process holds no other token and has no
   thread that queued before `me`; once per holding. Returns how long until the look may
   act (0: asked, or nothing to ask). */
int64_t hs_gang_look(int me, struct hs_gang *g, int64_t now)
{
    if (!signaller_quiet(me, g, now))
        return 0;
    int64_t wait = g->sib_seen + HS_GANG_MIN_NS - now;
    int32_t pid = hs_v.workers[me].pid;
    int cand = -1, cand_ci = -1;
    for (int ci = 0; ci < hs_v.ncpu; ci++) {
        int h = hs_v.cpus[ci].holder;
        if (h < 0 || h == me)
            continue;
        struct hs_worker *r = &hs_v.workers[h];
        if (hs_ld(&r->state) == HS_RUNNING && r->pid != pid && r->job == hs_job && r->thread
            && (cand < 0 || r->acquired_ns < hs_v.workers[cand].acquired_ns)) {
            cand = h;
            cand_ci = ci;
        }
    }
    if (cand < 0)
        return 0;
    struct hs_worker *r = &hs_v.workers[cand];
    int64_t since = r->acquired_ns;
    if (g->slot == cand && g->since == since)
        return 0;
    if (hs_holds_another(&hs_v, r->pid, cand_ci))
        return 0;  /* its process runs more than one thread: a gang, or becoming one */
    /* Its process waits to run whole too (each half of two gangs asking the other's holder
       would leave both halves again): only the process whose waiter queued first asks. */
    int64_t seq = hs_v.workers[me].seq;
    for (int w = 0; w < hs_ld(&hs_v.h->hi); w++) {
        struct hs_worker *o = &hs_v.workers[w];
        if (o->used == 1 && o->pid == r->pid && o->thread && hs_ld(&o->state) == HS_WAITING
            && o->seq < seq)
            return 0;
    }
    if (since + HS_GANG_MIN_NS - now > wait)
        wait = since + HS_GANG_MIN_NS - now;
    if (wait > 0)
        return wait;
    g->slot = cand;
    g->since = since;
    hs_nudge(r->pid, r->tid, hs_job_key());
    return 0;
}

void hs_early_reset(struct hs_early e[HS_EARLY_TRACK])
{
    for (int i = 0; i < HS_EARLY_TRACK; i++)
        e[i] = unseen;
}
