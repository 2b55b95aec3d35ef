/* One thread's side of the node's arbiter, inside an unmodified program (the cooperative
   shim, LD_PRELOADed by hybridsched's ShimJob): a thread runs while it holds a token, gives
   it up before every call that can block (hs_park) and takes one again after (hs_resume).
   The rules are rules.c's, the same as the Python workers'; the critical sections on the
   arbiter's mutex are cs.c's; the process and its threads join the job in members.c.
   Everything here runs with hs_t.depth > 0, so a call the shim makes itself, or a signal
   handler's, passes straight through the wrappers. */
#include "coop.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

__thread struct hs_thread hs_t __attribute__((tls_model("initial-exec"))) = {.slot = -1};
int hs_on;
struct hs_view hs_v;
int hs_job = -1;

/* How long a waiter sleeps before it looks for dead holders, and the longest it backs off
   to once another waiter made the period's scan: the Python workers' figures (worker.py),
   so a dead holder stalls the node as briefly whoever waits for its token. */
#define RECLAIM_POLL_NS 200000000LL
#define IDLE_POLL_NS 500000000LL
/* sched_yield calls in a row while other jobs' threads wait before a yield hands the token
   on: a runtime that yields in its spin (libomp when oversubscribed) gives its token up
   within tens of microseconds, while a lone yield (a lock's back-off) costs the job no
   hand-off to another job. A thread of its own job waiting for a token gets it at the
   first yield: it is likely what the yielder waits for (two threads taking turns by
   sched_yield, two jobs at once, took 64 yields a turn: 14x plain Linux, hostile review). */
#define YIELDS_TO_ROTATE 64
/* The unlocks while others wait between two looks at the clock in hs_release_point: a look
   is ~20 ns, an unlock of a lock loop's round a few, so the quantum is overrun by at most
   a few rounds. */
#define RELEASES_PER_LOOK 8
/* Shim threads keep the program's scheduling policy, unlike the Python workers, which hold
   their tokens as SCHED_BATCH (worker.HANDOFF_POLICY): a batch thread woken by the
   program's own events (a condition variable, a futex wake) or for its early look waits
   for the running thread's tick, and numpy's J = 2 run under coop took 2.7 s instead of
   1.5 s so. The price: a granted thread may preempt the one that woke it (the J = 2
   barrier loop ~3 % slower). */
long hs_raw(long nr, long a1, long a2, long a3, long a4, long a5, long a6)
{
    int saved = errno;
    /* a futex call made through syscall() by a library's constructor that ran before ours
       (the program's own libraries' run first) came here before hs_init looked libc up */
    if (__builtin_expect(!hs_real_syscall, 0))
        hs_resolve();
    long r = hs_real_syscall(nr, a1, a2, a3, a4, a5, a6);
    if (r == -1)
        r = -errno;
    errno = saved;
    return r;
}

void hs_count(int which)
{
    struct hs_job *j = &hs_v.jobs[hs_job];
    int64_t *c = which == HS_C_THREADS ? &j->threads : which == HS_C_CALLS ? &j->calls
               : which == HS_C_GRANTS ? &j->grants : which == HS_C_HANDOFFS ? &j->handoffs
               : which == HS_C_TRAPS ? &j->traps : which == HS_C_NUDGES ? &j->nudges
               : &j->unmanaged;
    __atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
}

/* the slot was taken away (the job ended under us): this thread runs unmanaged */
static void lost(void)
{
    hs_t.slot = -1;
}

static __attribute__((noinline)) int reclaim_due(void)
{
    struct hs_header *h = hs_v.h;
    int64_t last = __atomic_load_n(&h->reclaim_ns, __ATOMIC_RELAXED), now = hs_now_ns();
    struct hs_cs cs;
    if (now - last < RECLAIM_POLL_NS) {
        if (!hs_v.lock[HS_DIED_AT])
            return 0;
        hs_cs_lock(&cs);  /* which reclaims for the mutex's dead owner */
        hs_cs_unlock(&cs);
        return 0;
    }
    /* The period is claimed before the census (hs_census_take, outside the mutex), by one
       thread of the node: a census by each waiter that saw it due, 700 waiting threads of
       one command each reading /proc 1400 times a period, kept both CPUs in the kernel
       (the command never ended; the hostile review). */
    if (!__atomic_compare_exchange_n(&h->reclaim_ns, &last, now, 0, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED))
        return 0;
    struct hs_census c;
    hs_census_take(&c);
    hs_cs_lock(&cs);
    hs_cs_reclaim(&cs, hs_now_ns(), &c);
    hs_cs_unlock(&cs);
    return 1;
}

/* the reclaim of the tokens' holders now, whatever the scan's period, where every token
   is held and a holder is stopped or dead: a wait of this thread's reported a child stopped
   (wrap_io.c, after_wait), or a look at its job's holders found one stopped by its tracer
   (early.c). Only the holders are read (a read each, not the scan's census of every
   process): a tracer comes here at each stop of its tracees. */
void hs_reclaim_now(void)
{
    for (int ci = 0; ci < hs_v.ncpu; ci++)
        if (hs_ld(&hs_v.cpus[ci].holder) < 0)
            return;  /* one is free: this thread takes it */
    struct hs_census c;
    if (!hs_census_holders(&c))
        return;
    struct hs_cs cs;
    hs_cs_lock(&cs);
    hs_cs_reclaim(&cs, hs_now_ns(), &c);
    hs_cs_unlock(&cs);
}

/* the slots of process `pid`, which a wait of this thread's reaped, freed now with their
   tokens (wrap_io.c, after_wait): dead for certain, no /proc to read */
void hs_reclaim_gone(int32_t pid)
{
    int hi = hs_ld(&hs_v.h->hi), ours = 0;
    for (int w = 0; w < hi && w < hs_v.nworkers && !ours; w++)
        ours = hs_ld(&hs_v.workers[w].used) == 1 && hs_ld(&hs_v.workers[w].pid) == pid;
    /* reaped, its pid is free: one a new process has taken already is left to the scan */
    if (!ours || kill(pid, 0) == 0 || errno != ESRCH)
        return;
    struct hs_census c = {.dead = {pid, 0}, .ndead = 1, .nstopped = 0};
    struct hs_cs cs;
    hs_cs_lock(&cs);
    hs_cs_reclaim(&cs, hs_now_ns(), &c);
    hs_cs_unlock(&cs);
}

static void pin(int me)
{
    int ci = hs_v.workers[me].cpu;
    if (ci < 0)
        return;
    int c = hs_v.cpus[ci].cpu;
    if (c < 0 || c >= CPU_SETSIZE)
        return;
    /* the slot's `pinned`, which a taker of this thread's lazy token clears */
    if (hs_v.workers[me].pinned != c) {  /* else the granter did */
        cpu_set_t s;
        CPU_ZERO(&s);
        CPU_SET(c, &s);
        hs_real_setaffinity(0, sizeof s, &s);
        hs_v.workers[me].pinned = c;
    }
}

/* Around an exec: the new image starts with the mask the program would have had, not the
   one CPU its thread is pinned to, since runtimes may size their pools from it before the
   new image's shim is set up (libgomp's constructor does: `sh -c 'omp_prog'` ran 1 thread);
   that shim pins it again (`pinned` cleared). A failed exec pins the thread back. */
void hs_exec_affinity(int before)
{
    int me = hs_t.slot;
    if (me < 0)
        return;
    if (before) {
        cpu_set_t m;
        hs_natural_mask(&m, 1);
        hs_real_setaffinity(0, sizeof m, &m);
        hs_v.workers[me].pinned = -1;
    } else {
        pin(me);
    }
}

/* --- taking and giving up the token ------------------------------------------------------ */

/* The lazily parked holders an acquire looks at for a token it takes away: one per CPU, so
   as many as the CPUs this tracks (on a node with more, those past it stay pinned) */
#define HS_LAZY_TRACK 256

/* wait_token's request again, its critical section in a frame of its own */
static __attribute__((noinline)) void ask_again(int me)
{
    struct hs_cs cs;
    int w2[2];
    struct hs_worker *r = &hs_v.workers[me];
    hs_cs_lock(&cs);
    if (hs_own(me) && hs_ld(&r->state) != HS_WAITING) {
        hs_cas(&r->state, HS_LAZY, HS_RUNNING);
        hs_rule_acquire(&hs_v, me, hs_now_ns(), w2);
        if (w2[0] != me)
            hs_cs_add(&cs, w2[0]);
        hs_cs_add(&cs, w2[1]);
    }
    hs_cs_unlock(&cs);
}

static void wait_token(int me, int queued)
{
    /* the node's schedule of scans, not this wait's: waits cut short by grants (threads
       passing the tokens left among themselves) never lasted a period, and a thread gone
       by the raw exit call kept its token for the process's life */
    int64_t poll = RECLAIM_POLL_NS, next_reclaim = hs_v.h->reclaim_ns + poll;
    struct hs_early e[HS_EARLY_TRACK];
    struct hs_gang gang = {-1, 0, -1, 0, 0};
    int posted = hs_t.posted;  /* a pool thread posted work: its gang look (early.c) */
    hs_t.posted = 0;
    int64_t every = HS_EARLY_NS;  /* between the early looks (early.c) */
    hs_early_reset(e);
    for (;;) {
        struct hs_worker *r = &hs_v.workers[me];
        int st = hs_ld(&r->state);
        if (r->used != 1 || r->pid != hs_pid || r->tid != hs_t.tid) {
            lost();
            return;
        }
        if (st == HS_RUNNING)
            break;
        /* Granted, then taken back while stopped before it saw the grant: by its tracer
           (wrap_io.c, after_wait), which stops it again at each system call it makes
           here, and took each grant back again (strace -f on one CPU never ended); it
           runs without a token until its next call that parks. A thread stopped by job
           control asks again (its nudge is queued). */
        if (st == HS_BLOCKED && queued && hs_self_traced(hs_t.tid))
            return;
        if (st != HS_WAITING) {  /* not queued (never so in practice): ask again */
            ask_again(me);
            continue;
        }
        queued = 1;
        int64_t now = hs_now_ns();
        if (now >= next_reclaim) {
            poll = reclaim_due() ? RECLAIM_POLL_NS : (2 * poll < IDLE_POLL_NS ? 2 * poll : IDLE_POLL_NS);
            next_reclaim = now + poll;
        }
        int64_t t = next_reclaim - now;
        int64_t look = hs_early_look(me, e, &every, now);
        if (look && t > look)
            t = look;
        int64_t gang_due = posted ? hs_gang_look(me, &gang, now) : 0;
        if (gang_due && t > gang_due)
            t = gang_due;
        struct timespec ts = {t / 1000000000LL, t % 1000000000LL};
        hs_raw(SYS_futex, (long)&hs_v.wake[me], FUTEX_WAIT, 0, (long)&ts, 0, 0);
    }
    if (queued) {
        hs_count(HS_C_GRANTS);
        hs_early_hand_over(me);
    }
    pin(me);
}

/* The holders asleep with their token kept (lazily parked), before an acquire may take
   one of those tokens away (the rule's revoke_lazy) */
static int lazy_holders(int me, int out[], int max)
{
    int n = 0;
    for (int ci = 0; ci < hs_v.ncpu && n < max; ci++) {
        int h = hs_v.cpus[ci].holder;
        if (h >= 0 && h != me && hs_ld(&hs_v.workers[h].state) == HS_LAZY)
            out[n++] = h;
    }
    return n;
}

/* A lazily parked thread whose token was taken away sleeps pinned to that token's CPU,
   which another thread holds now: the wake-up that ends its sleep would put it there,
   behind that thread, while a CPU it could have used idles. Its taker lets it run on any
   of the arbiter's CPUs instead (two co-located barrier loops 2 % faster, 2026-12-06; a
   lazy park itself costs nothing more); its next grant pins it again. Called under the
   mutex with the holders lazy_holders saw; the tids to unpin go to `tids`. */
static int revoked_tids(const int *lazy, int n, int tids[])
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        struct hs_worker *r = &hs_v.workers[lazy[i]];
        if (hs_ld(&r->state) == HS_BLOCKED && r->tid > 0) {
            tids[k++] = r->tid;
            r->pinned = -1;
        }
    }
    return k;
}

static void unpin_tids(const int *tids, int n)
{
    if (n == 0)
        return;
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int ci = 0; ci < hs_v.ncpu; ci++)
        if (hs_v.cpus[ci].cpu >= 0 && hs_v.cpus[ci].cpu < CPU_SETSIZE)
            CPU_SET(hs_v.cpus[ci].cpu, &all);
    for (int i = 0; i < n; i++)
        hs_real_setaffinity(tids[i], sizeof all, &all);  /* one gone meanwhile: ESRCH */
}

/* The acquire's critical section, apart from the wait that may follow it (its arrays, one
   slot per CPU, off the stack meanwhile: threads of 16 KiB stacks run under the shim):
   whether it queued, -1 if the slot is no longer this thread's. */
static __attribute__((noinline)) int acquire_section(int me)
{
    struct hs_cs cs;
    int track = hs_v.ncpu < 1 ? 1 : hs_v.ncpu < HS_LAZY_TRACK ? hs_v.ncpu : HS_LAZY_TRACK;
    int w2[2], lazy[track], tids[track];
    hs_cs_lock(&cs);
    if (!hs_own(me)) {
        hs_cs_unlock(&cs);
        lost();
        return -1;
    }
    int32_t *state = &hs_v.workers[me].state;
    hs_cas(state, HS_LAZY, HS_RUNNING);  /* taken lazily by the watchdog while we ran: ours */
    int nlazy = lazy_holders(me, lazy, track);
    hs_rule_acquire(&hs_v, me, hs_now_ns(), w2);
    int nrevoked = revoked_tids(lazy, nlazy, tids);
    int queued = hs_ld(state) == HS_WAITING;
    if (w2[0] != me)
        hs_cs_add(&cs, w2[0]);
    hs_cs_add(&cs, w2[1]);
    hs_cs_unlock(&cs);
    unpin_tids(tids, nrevoked);
    return queued;
}

void hs_acquire(int me)
{
    int queued = acquire_section(me);
    if (queued >= 0)
        wait_token(me, queued);
}

static void release(int me)
{
    struct hs_cs cs;
    hs_cs_lock(&cs);
    if (!hs_own(me)) {
        hs_cs_unlock(&cs);
        lost();
        return;
    }
    hs_cas(&hs_v.workers[me].state, HS_LAZY, HS_RUNNING);
    int w = hs_rule_release(&hs_v, me, hs_now_ns());
    if (w >= 0)
        hs_count(HS_C_HANDOFFS);
    hs_cs_add(&cs, w);
    hs_cs_unlock(&cs);
}

/* lock-free paths first check the slot is ours (it changes hands only when reclaimed) */
static int mine_unlocked(int me)
{
    struct hs_worker *r = &hs_v.workers[me];
    return r->used == 1 && r->tid == hs_t.tid && r->pid == hs_pid;
}

/* the token kept lazily (nobody waits): 1, else 0 with the thread left running */
static int park_lazily(int me)
{
    if (!hs_rule_lazy_park(&hs_v, me))
        return 0;
    hs_t.parked = HS_PARK_LAZY;
    return 1;
}

void hs_park(void)
{
    int me = hs_t.slot;
    hs_count(HS_C_CALLS);
    if (!mine_unlocked(me)) {
        lost();
        return;
    }
    if (park_lazily(me))
        return;
    release(me);
    hs_t.parked = HS_PARK_RELEASED;
}

/* the lazy park alone, not counted as a call */
int hs_park_lazy(void)
{
    int me = hs_t.slot;
    return mine_unlocked(me) && park_lazily(me);
}

void hs_resume(void)
{
    int me = hs_t.slot;
    if (me < 0)
        return;
    int lazy = hs_t.parked == HS_PARK_LAZY;
    hs_t.parked = HS_PARK_NONE;
    if (lazy && hs_rule_lazy_resume(&hs_v, me))
        return;
    hs_acquire(me);
}

/* a rotation (sched_yield in a spin, or the watchdog's signal): to another job's waiter
   once the quantum is over (the boundary rule), else to a waiter of the own job first */
void hs_rotate(void)
{
    int me = hs_t.slot;
    if (me < 0 || !mine_unlocked(me))
        return;
    if (hs_ld(&hs_v.workers[me].state) == HS_BLOCKED) {  /* outside the shim: its token */
        hs_acquire(me);  /* was taken while it was stopped (hs_reclaim) */
        return;
    }
    if (hs_ld(&hs_v.h->waiting) <= 0)
        return;
    struct hs_cs cs;
    int w2[2] = {-1, -1};
    hs_cs_lock(&cs);
    if (!hs_own(me)) {
        hs_cs_unlock(&cs);
        lost();
        return;
    }
    hs_rule_boundary(&hs_v, me, hs_now_ns(), w2);
    int rotated = hs_ld(&hs_v.workers[me].state) == HS_WAITING;
    if (rotated)
        hs_count(HS_C_HANDOFFS);
    hs_cs_add(&cs, w2[0]);
    hs_cs_add(&cs, w2[1]);
    hs_cs_unlock(&cs);
    if (rotated) {
        wait_token(me, 1);
    } else if (hs_ld(&hs_v.h->waiting) > 0) {
        release(me);
        hs_acquire(me);
    }
}

/* a rotation signal that came while the thread was inside the shim, answered as it leaves */
void hs_pending_rotation(void)
{
    hs_t.pending = HS_PEND_NONE;
    if (hs_t.slot >= 0) {
        hs_count(HS_C_NUDGES);
        hs_rotate();
    }
}

void hs_yield_point(void)
{
    int me = hs_t.slot;
    if (hs_ld(&hs_v.h->waiting) <= 0 || hs_ld(&hs_v.workers[me].state) != HS_RUNNING) {
        hs_t.yields = 0;
        return;
    }
    if (hs_rule_expired(&hs_v, me, hs_now_ns()) || ++hs_t.yields >= YIELDS_TO_ROTATE
        || hs_sibling_waiting(me)) {
        hs_t.yields = 0;
        hs_rotate();
    }
}

/* An unlock: a scheduling point where the thread gives up what others may wait for, so a
   rotation there makes no one wait on a holder without a token. A holder that never blocks
   but unlocks (a lock loop, whose waits the token makes rare) takes the boundary rule there
   once its quantum is over, as at sched_yield, instead of keeping its token until the
   watchdog's bound. Only where the thread is left holding no lock the shim saw taken
   (hs_took): one it rotated holding would be spun for by the thread given its token. A
   lock the shim cannot see (a program's own atomics) can still be held here: the thread
   given the token then spins for it until the early look asks it back (0.5 ms), once a
   quantum at most. (A turn for the job's own waiting threads every 5 ms as well cost such
   a program 8x, and gained the lock loops nothing measurable.) */
void hs_release_point(void)
{
    int me = hs_t.slot;
    if (hs_t.held > 0 || hs_ld(&hs_v.h->waiting) <= 0 || ++hs_t.releases % RELEASES_PER_LOOK)
        return;
    if (hs_ld(&hs_v.workers[me].state) == HS_RUNNING && hs_rule_expired(&hs_v, me, hs_now_ns()))
        hs_rotate();
}
