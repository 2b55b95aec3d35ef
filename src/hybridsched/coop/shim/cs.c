/* The arbiter's mutex held by one of the shim's threads: a critical section collects the
   slots its rules woke and the stopped holders a reclaim took a token from, and wakes them
   only once the mutex is let go, so that nobody woken waits for the mutex at once. A dead
   owner's mutex is made consistent and the segment reclaimed in the next section. */
#include "coop.h"
#include <errno.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

static void fatal(const char *what, int err)
{
    dprintf(2, "hybridsched coop shim: %s (%s); stopping rather than running unlocked\n",
            what, strerror(err));
    abort();
}

void hs_cs_add(struct hs_cs *cs, int w)
{
    if (w >= 0 && cs->n < HS_MAX_WOKEN)
        cs->woken[cs->n++] = w;
}

static void note(int32_t *pairs, int *n, int32_t pid, int32_t tid)
{
    for (int i = 0; i < *n; i++)
        if (pairs[2 * i] == pid && pairs[2 * i + 1] == tid)
            return;
    if (*n < HS_CENSUS_MAX) {
        pairs[2 * *n] = pid;
        pairs[2 * *n + 1] = tid;
        *n += 1;
    }
}

static void census_one(struct hs_census *c, int32_t pid, int32_t tid)
{
    int a = hs_alive(NULL, pid, tid);
    if (!a)
        note(c->dead, &c->ndead, pid, tid);
    else if (a == HS_STOPPED)
        note(c->stopped, &c->nstopped, pid, tid);
}

/* (coop.h) the slots read without the mutex: one that changes meanwhile is read again at
   the next scan. Each process once per run of its slots, and a thread only while it holds
   a token (the one state in which it can die or stop with something to give back: a
   waiter is inside the shim, and one that ends runs its destructor): a command of 1000
   threads cost 2000 reads of /proc a scan, now about 1 per process and 1 per CPU. A job's
   process is read only while it has no worker, as hs_reclaim asks. */
void hs_census_take(struct hs_census *c)
{
    c->ndead = c->nstopped = 0;
    int hi = hs_ld(&hs_v.h->hi), last = 0;
    for (int w = 0; w < hi && w < hs_v.nworkers; w++) {
        struct hs_worker *r = &hs_v.workers[w];
        int32_t pid = hs_ld(&r->pid), tid = hs_ld(&r->tid);
        if (hs_ld(&r->used) != 1 || pid <= 0)
            continue;
        if (pid != last)
            census_one(c, pid, 0);
        last = pid;
        if (r->thread && tid > 0 && hs_ld(&r->cpu) >= 0)
            census_one(c, pid, tid);
    }
    for (int j = 0; j < hs_v.njobs; j++) {
        int32_t pid = hs_ld(&hs_v.jobs[j].pid), has = 0;
        for (int w = 0; w < hi && w < hs_v.nworkers && !has; w++)
            has = hs_ld(&hs_v.workers[w].used) && hs_v.workers[w].job == j;
        if (hs_ld(&hs_v.jobs[j].used) == 1 && !has && pid > 0)
            census_one(c, pid, 0);
    }
}

/* (coop.h) the census of the tokens' holders alone: whether one is dead or stopped */
int hs_census_holders(struct hs_census *c)
{
    c->ndead = c->nstopped = 0;
    for (int ci = 0; ci < hs_v.ncpu; ci++) {
        int h = hs_ld(&hs_v.cpus[ci].holder);
        if (h < 0 || h >= hs_v.nworkers)
            continue;
        struct hs_worker *r = &hs_v.workers[h];
        int32_t pid = hs_ld(&r->pid), tid = hs_ld(&r->tid);
        if (hs_ld(&r->used) == 1 && r->thread && pid > 0 && tid > 0)
            census_one(c, pid, tid);
    }
    return c->ndead + c->nstopped;
}

/* hs_reclaim within a critical section, by a census taken before it: the slots woken, and
   the shim threads among the holders it took a token from (stopped), to be nudged once
   the lock is let go */
void hs_cs_reclaim(struct hs_cs *cs, int64_t now, const struct hs_census *c)
{
    int32_t held[HS_MAX_WOKEN];
    int n = 0;
    for (int ci = 0; ci < hs_v.ncpu && n < HS_MAX_WOKEN; ci++) {
        int h = hs_v.cpus[ci].holder;
        if (h >= 0 && hs_v.workers[h].thread == 1 && hs_ld(&hs_v.workers[h].state) == HS_RUNNING)
            held[n++] = h;
    }
    struct hs_listed d = {c->dead, c->stopped, c->ndead, c->nstopped};
    cs->n += hs_reclaim(&hs_v, now, hs_alive_unless_listed, &d, cs->woken + cs->n,
                        HS_MAX_WOKEN - cs->n);
    /* under the lock, only a reclaim makes a holder BLOCKED */
    for (int i = 0; i < n && cs->nrevoked < HS_MAX_REVOKED; i++) {
        struct hs_worker *r = &hs_v.workers[held[i]];
        if (r->used == 1 && hs_ld(&r->state) == HS_BLOCKED) {
            cs->revoked[cs->nrevoked].pid = r->pid;
            cs->revoked[cs->nrevoked].tid = r->tid;
            cs->revoked[cs->nrevoked++].key = hs_v.jobs[r->job].key;
        }
    }
}

/* How long one wait for the arbiter's mutex lasts before its word is looked at again. An
   unlocker stopped by its tracer between freeing the word and waking a waiter (strace -f
   stops that FUTEX_WAKE at its entry) never wakes it, and a tracer waiting there, for the
   one tracee it alone could continue, waited for ever (4 runs in 6 of `strace -f` of a
   16-thread mutex loop inside the job: the second hostile review). Shorter looks again
   sooner after such a lost wake-up; each look costs a waiter whose holder is merely slow
   one system call more. */
#define LOCK_LOOK_NS 2000000L

static int lock_arbiter(pthread_mutex_t *m)
{
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);  /* the clock pthread_mutex_timedlock reads */
        t.tv_nsec += LOCK_LOOK_NS;
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec += 1;
            t.tv_nsec -= 1000000000L;
        }
        int r = hs_real_mutex_timedlock(m, &t);
        if (r != ETIMEDOUT)
            return r;
    }
}

void hs_cs_lock(struct hs_cs *cs)
{
    pthread_mutex_t *m = (pthread_mutex_t *)hs_v.lock;
    cs->n = cs->nrevoked = 0;
    int r = lock_arbiter(m);
    if (r == EOWNERDEAD) {  /* its owner died in the middle: the next step reclaims it */
        hs_real_mutex_consistent(m);
        hs_v.lock[HS_DIED_AT] = 1;
    } else if (r != 0) {
        fatal("cannot lock the arbiter's mutex", r);
    }
    if (hs_v.lock[HS_DIED_AT]) {  /* rare: its census under the mutex */
        struct hs_census c;
        hs_census_take(&c);
        hs_cs_reclaim(cs, hs_now_ns(), &c);
        hs_v.lock[HS_DIED_AT] = 0;
    }
}

/* handoff._wake: pin the new holder to its token's CPU, then wake it */
void hs_post(struct hs_view *v, int slot)
{
    struct hs_worker *r = &v->workers[slot];
    int ci = r->cpu;
    if (r->used == 1 && r->tid > 0 && ci >= 0) {
        int c = v->cpus[ci].cpu;
        if (r->pinned != c && c >= 0 && c < CPU_SETSIZE) {
            cpu_set_t s;
            CPU_ZERO(&s);
            CPU_SET(c, &s);
            if (hs_real_setaffinity(r->tid, sizeof s, &s) == 0)
                r->pinned = c;
        }
    }
    hs_raw(SYS_futex, (long)&v->wake[slot], FUTEX_WAKE, 1, 0, 0, 0);
}

void hs_cs_unlock(struct hs_cs *cs)
{
    hs_real_mutex_unlock((pthread_mutex_t *)hs_v.lock);
    for (int i = 0; i < cs->n; i++)
        hs_post(&hs_v, cs->woken[i]);
    /* A stopped thread takes the signal once continued, and queues for a token at once
       (hs_rotate) rather than running without one until its next call. Not one its
       tracer stopped (strace, gdb): the signal is a stop of its own for the tracer to
       report (gdb stops there), after which a tracer in its job took that token back again
       and nudged it again, without end (wrap_io.c, after_wait); continued, it runs
       without its token until its next call that parks. */
    for (int i = 0; i < cs->nrevoked; i++)
        if (!hs_traced(cs->revoked[i].pid, cs->revoked[i].tid))
            hs_nudge(cs->revoked[i].pid, cs->revoked[i].tid, cs->revoked[i].key);
}

/* the slot is still this thread's (not reclaimed, not someone else's since) */
int hs_own(int me)
{
    struct hs_worker *r = &hs_v.workers[me];
    return me >= 0 && r->used == 1 && r->pid == hs_pid && r->tid == hs_t.tid && r->thread == 1;
}
