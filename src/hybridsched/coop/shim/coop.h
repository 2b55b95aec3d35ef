/* The cooperative shim's internals, shared by its C files. The segment's layout comes from
   "hs_layout.h", generated from hybridsched/coop/layout.py when the shim is built. */
#ifndef HS_COOP_H
#define HS_COOP_H
#define _GNU_SOURCE
#include <stdint.h>
#include <sched.h>
#include "hs_layout.h"
#include <pthread.h>
#include <signal.h>
#include <sys/types.h>
#include <poll.h>
#include <time.h>

#define HS_EXPORT __attribute__((visibility("default")))
#define HS_HIDDEN __attribute__((visibility("hidden")))

/* One segment's regions (the shared one in a run, a private copy in the tests). */
struct hs_view {
    struct hs_header *h;
    struct hs_cpu *cpus;
    struct hs_job *jobs;
    struct hs_worker *workers;
    int32_t *wake;
    unsigned char *lock;
    int ncpu, njobs, nworkers;
    size_t size;
};

/* the liveness a reclaim asks about: tid 0 for the process, else that thread of it; 0
   gone, HS_STOPPED stopped (a job control stop or a tracer's), any other value alive */
typedef int (*hs_alive_fn)(void *ctx, int32_t pid, int32_t tid);
#define HS_STOPPED 2

/* rules.c: coop/rules.py and coop/state.py's membership, on the same bytes */
HS_HIDDEN size_t hs_view_init(struct hs_view *v, void *base, int ncpu, int njobs, int nworkers);
HS_HIDDEN void hs_rule_acquire(struct hs_view *v, int w, int64_t now, int woken[2]);
HS_HIDDEN int hs_rule_try_acquire(struct hs_view *v, int w, int64_t now);
HS_HIDDEN int hs_rule_release(struct hs_view *v, int w, int64_t now);
HS_HIDDEN int hs_rule_lazy_park(struct hs_view *v, int w);
HS_HIDDEN int hs_rule_lazy_resume(struct hs_view *v, int w);
HS_HIDDEN int hs_rule_expired(struct hs_view *v, int w, int64_t now);
HS_HIDDEN void hs_rule_boundary(struct hs_view *v, int w, int64_t now, int woken[2]);
HS_HIDDEN int hs_rule_leave_worker(struct hs_view *v, int w, int64_t now);
HS_HIDDEN int hs_rule_revoke_holder(struct hs_view *v, int w, int64_t now);
/* whether a thread of process `pid` holds a token other than CPU row `but`'s */
HS_HIDDEN int hs_holds_another(struct hs_view *v, int32_t pid, int but);
HS_HIDDEN int hs_find_job(struct hs_view *v, int64_t key);
HS_HIDDEN int hs_join_worker(struct hs_view *v, int job, int32_t pid, int32_t tid, int thread);
/* dead, stopped: n (pid, tid) pairs each; (pid, 0) is a process, (pid, tid) a thread */
struct hs_listed {
    const int32_t *dead, *stopped;
    int ndead, nstopped;
};
/* an hs_alive_fn over such lists (ctx): alive unless listed (rules.c) */
HS_HIDDEN int hs_alive_unless_listed(void *ctx, int32_t pid, int32_t tid);
HS_HIDDEN int hs_reclaim(struct hs_view *v, int64_t now, hs_alive_fn alive, void *ctx,
                         int32_t *woken, int max);

static inline int32_t hs_ld(const int32_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
static inline void hs_st(int32_t *p, int32_t x) { __atomic_store_n(p, x, __ATOMIC_RELAXED); }
static inline int hs_cas(int32_t *p, int32_t expect, int32_t x)
{
    return __atomic_compare_exchange_n(p, &expect, x, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/* runtime.c: the thread's side of the arbiter, used by the wrappers and the trap */
struct hs_thread {
    int slot;          /* this thread's worker slot, -1: not managed */
    int tid;
    int depth;         /* > 0 inside the shim: a nested call passes straight through */
    int parked;        /* how the last park left the token: HS_PARK_* */
    int yields;        /* consecutive sched_yield calls while others wait */
    unsigned releases; /* unlocks while others wait (hs_release_point) */
    int held;          /* locks seen taken and not yet given back (hs_took, hs_gave) */
    int spinning;      /* of them, pthread spinlocks */
    int64_t spin_left; /* condition-variable waits: the spin still allowed (wrap_locks.c) */
    int64_t spin_at;   /* when spin_left was last brought up to date, 0 never */
    const void *unsignalled; /* the variable whose last wait spun and saw no signal */
    int has_mask;      /* the program set its own mask (answered back, not applied) */
    int pending;       /* a rotation asked for and not yet made: HS_PEND_* */
    int posted;        /* woken from an untimed condition-variable wait (the gang look's) */
    cpu_set_t mask;
    volatile char selector; /* Syscall User Dispatch: HS_SUD_ALLOW or HS_SUD_BLOCK */
    char armed;        /* Syscall User Dispatch is on for this thread */
};
/* The watchdog's request (its bound is past): rotated as the thread leaves the shim. A
   sibling's early look (early.c): the same, but not while the thread holds a pthread
   spinlock, only once it has given the last back: a thread given the token would spin for
   it, calling nothing, until its own early look (8 runs in 10 of a spinlock loop at
   HS_EARLY_NS = 0.5 ms). Not for every lock: a mutex's waiter parks at once when its
   holder has no token, and OpenBLAS's caller spins for its workers holding a mutex (its
   level-3 lock), so deferring past mutexes kept that spin going until the watchdog's bound
   (numpy at J = 2 under coop 4.1x slower). A spinlock kept past the bound is the
   watchdog's to act on. */
#define HS_PEND_NONE 0
#define HS_PEND_NOW 1
#define HS_PEND_UNHELD 2
#define HS_PARK_NONE 0
#define HS_PARK_LAZY 1
#define HS_PARK_RELEASED 2

extern __thread struct hs_thread hs_t __attribute__((tls_model("initial-exec")));
extern int hs_on;            /* the shim manages this process */
extern struct hs_view hs_v;
extern int hs_job;

HS_HIDDEN void hs_park(void);
HS_HIDDEN int hs_park_lazy(void);
HS_HIDDEN void hs_resume(void);
HS_HIDDEN void hs_yield_point(void);
HS_HIDDEN void hs_release_point(void);
HS_HIDDEN void hs_rotate(void);
HS_HIDDEN void hs_thread_begin(void);
HS_HIDDEN void hs_thread_end(void *unused);
HS_HIDDEN void hs_count(int which);
HS_HIDDEN int hs_nudge_is_ours(const siginfo_t *si);
static inline int64_t hs_now_ns(void)  /* the clock of the segment's times */
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
/* How long a holder of the job may go without entering the shim while its own job's
   threads wait before the job's first waiter asks it to rotate: such
   a holder is most likely spinning for those very threads (OpenBLAS's caller spins,
   calling nothing, until its workers have run), while one that calls into the shim (a
   lock loop) is computing and keeps its token until it blocks or the watchdog's bound.
   Shorter catches a spin sooner but wakes the waiter more often, each time a few µs of a
   CPU that a holder wants, and reaches more holders that merely compute between calls;
   one holding a spinlock is rotated only as it gives it back (HS_PEND_UNHELD).
   0.5 ms against 2 ms: numpy (OpenBLAS) at J = 2 under coop env/coop 0.74 ± 0.14 instead
   of 0.62 ± 0.13 over 15 repetitions (2026-12-06, before that deferral, which a
   rotation inside a pthread spinlock then showed was needed). */
#define HS_EARLY_NS 500000LL
/* The longest a waiter goes between looks at holders that entered the shim since its last
   look (computing, not spinning): it doubles its period from HS_EARLY_NS up to this. Longer
   saves more wake-ups (at a fixed 2 ms, co-located lock loops ran 1.0 % ± 0.8 slower) but
   catches a holder that computed and then began to spin up to twice this much later: the
   first look after the spin began still sees the calls made before it (26-28 ms measured
   after 40 ms of calls, in the review of 2026-12-06), longer than the default quantum. */
#define HS_EARLY_MAX_NS 16000000LL
/* A holder that entered the shim this many times since the last look calls into it at
   least every HS_EARLY_NS / 32 (~16 µs: a lock loop's rounds, not the few calls of a runtime
   that then spins): the period goes to HS_EARLY_BUSY_NS at once, and doubles from there.
   Each look is a wake-up on a CPU some holder is using (~20 µs of it here), and a
   co-located lock loop's waiter looked 5 times in each 20 ms quantum, its first looks every
   0.5-4 ms; now 3 (a holder busy for 15 ms: 5 switches of its waiter, now 3). The price: a
   holder that made that many calls and then begins a spin that calls nothing is asked up to
   HS_EARLY_BUSY_NS + HS_EARLY_MAX_NS later, 24 ms, where plain doubling took 6-12 ms after
   5 ms of calls; after 16 ms of calls or more, both take up to twice HS_EARLY_MAX_NS. Going
   to HS_EARLY_MAX_NS at once took 31 ms after 5 ms of calls (the review). */
#define HS_EARLY_BUSY 32
#define HS_EARLY_BUSY_NS (HS_EARLY_MAX_NS / 2)
/* holders a waiter keeps track of (a job with more tokens than this has its other
   holders left to the watchdog's bound) */
#define HS_EARLY_TRACK 8

/* How long a holder's CPU time must stand still before a waiter takes it for asleep (in a
   call the shim does not see) or preempted, and looks at it less often: longer than a
   scheduler tick (10 ms at HZ = 100), since another process's thread's CPU time comes
   from /proc, which moves only at ticks and switches while the thread runs (here, at
   HZ = 250, 1.5 % of its gaps exceeded 5 ms: the review). Shorter would take a spinning
   holder of another process for asleep; longer, more looks at one that sleeps (every
   HS_EARLY_NS until then). */
#define HS_EARLY_STILL_NS 12000000LL
/* The longest period between looks at a holder taken for asleep: when it wakes and spins,
   it is asked to rotate about this late at most (its sibling ran 1.4-6.7 ms after the spin
   began; 3-17 ms when the period went up to HS_EARLY_MAX_NS, 1.8-4.2 ms with no back-off:
   the review); each look costs its waiter a wake-up (~20 µs of a CPU). */
#define HS_EARLY_STILL_MAX_NS 4000000LL

/* The gang look (early.c, hs_gang_look): a thread that waits for a token while the sibling
   of its own process that last signalled a condition variable holds one and has not
   entered the shim for this long (OpenBLAS's caller posts its pool thread's job and then
   computes its share and spins for the pool thread's, calling nothing) asks a holder of
   another process of its job to rotate once that one has held its token this long too,
   if that process holds no other token (a gang running whole is never broken up); the
   token then comes to the waiter (layout.PREF_SPAN). Shorter takes tokens from processes
   that just got them; longer leaves both halves spinning longer. 30, 100 and 300 µs ran
   numpy in 3 forked processes (J = 1) alike: 0.61 s, against 0.94 s without the look and
   0.70-0.75 s under env. Any running sibling, signaller or not, was the first version's
   test: threads that compute apart (xz -T2, piped into gzip) took the single-threaded
   stages' tokens every 0.1 ms and ran up to 2x slower (the hostile review). Only a thread
   woken from an untimed wait asks (a pool thread posted work: OpenBLAS's): CPython
   signals its GIL's variable at every release, its waiters wait timed, and a two-thread
   Python process took a one-thread one's token and left it the run's end alone, the
   command 10-12 % slower (the second review). */
#define HS_GANG_MIN_NS 100000LL

/* what a waiter saw of one of its job's holders at its last look */
struct hs_early {
    int slot;
    int32_t entries;
    int64_t since;
    int64_t cpu_ns;  /* the holder's CPU time, -1 unknown */
    int asked;       /* this holding was asked to rotate already */
    int64_t moved;   /* when its CPU time was last seen to change */
};

HS_HIDDEN int64_t hs_early_look(int me, struct hs_early e[HS_EARLY_TRACK], int64_t *every,
                                int64_t now);
HS_HIDDEN void hs_early_reset(struct hs_early e[HS_EARLY_TRACK]);
HS_HIDDEN void hs_early_hand_over(int me);
/* a waiter's gang look: the holding it asked to rotate last (slot, and when it was
   granted), and the signalling sibling it watches (slot, its count of shim entries, and
   when that count was first seen) */
struct hs_gang {
    int slot;
    int64_t since;
    int sib;
    int32_t sib_entries;
    int64_t sib_seen;
};
/* the slot of this process's thread that last signalled a condition variable holding a
   token (wrap_locks.c), -1 none */
HS_HIDDEN extern int hs_last_signaller;
HS_HIDDEN int64_t hs_gang_look(int me, struct hs_gang *asked, int64_t now);
/* whether another thread of this job waits for a token (early.c) */
HS_HIDDEN int hs_sibling_waiting(int me);
HS_HIDDEN int hs_self_pid(void);
HS_HIDDEN int64_t hs_job_key(void);
HS_HIDDEN void hs_nudge(int pid, int tid, int64_t key);  /* early.c */
HS_HIDDEN void hs_natural_mask(cpu_set_t *out, int own);
/* segment.c */
HS_HIDDEN size_t hs_map_segment(const char *path);
HS_HIDDEN int hs_alive(void *ctx, int32_t pid, int32_t tid);
HS_HIDDEN int hs_traced(int32_t pid, int32_t tid);  /* in a tracer's stop (state t) */
HS_HIDDEN int hs_self_traced(int tid);  /* this process's thread `tid` has a tracer */
HS_HIDDEN ssize_t hs_task_file(int pid, int tid, const char *name, char *buf, size_t size);
HS_HIDDEN void hs_natural_cpus(const char *list);
HS_HIDDEN void hs_warn(const char *fmt, const char *a, const char *b);
HS_HIDDEN long hs_raw(long nr, long a1, long a2, long a3, long a4, long a5, long a6);
HS_HIDDEN long hs_futex(long a1, long a2, long a3, long a4, long a5, long a6);
/* a handler the program installs (wrap_sync.c: futex waits do not spin past one that interrupts) */
HS_HIDDEN void hs_note_handler(int sig, const void *handler, unsigned long flags);
/* the same from the raw system call's arguments: the kernel's sigaction holds the handler,
   then the flags */
static inline void hs_note_rt_sigaction(long sig, long act)
{
    if (act)
        hs_note_handler((int)sig, ((void *const *)act)[0], ((const unsigned long *)act)[1]);
}
HS_HIDDEN void hs_resolve(void);
/* pin the slot's thread to its token's CPU, then wake it (cs.c; owner.c's too) */
HS_HIDDEN void hs_post(struct hs_view *v, int slot);
HS_HIDDEN int hs_launcher_pid(void);

/* cs.c: a critical section on the arbiter's mutex */
/* slots woken by one critical section: a grant or two, or one per dead holder reclaimed;
   a waiter beyond finds its grant at its next poll */
#define HS_MAX_WOKEN 64
/* stopped holders one critical section can nudge (a stopped job's tokens): past it, one
   continued runs without its token until its next call that parks; more is 16 bytes each
   of the stack of every thread in a critical section (threads of 16 KiB stacks run here) */
#define HS_MAX_REVOKED 16

struct hs_cs {
    int32_t woken[HS_MAX_WOKEN];
    int n;
    /* shim threads whose token a reclaim took (stopped), to nudge once the lock is let go:
       read under the lock, as the slot may be someone else's by then */
    struct { int32_t pid, tid; int64_t key; } revoked[HS_MAX_REVOKED];
    int nrevoked;
};
HS_HIDDEN void hs_cs_lock(struct hs_cs *cs);
HS_HIDDEN void hs_cs_unlock(struct hs_cs *cs);  /* then wakes what it collected */
HS_HIDDEN void hs_cs_add(struct hs_cs *cs, int w);  /* a slot to wake (-1: none) */
/* The registered processes and threads found dead or stopped, read from /proc before the
   arbiter's mutex is taken: a thread stopped while it holds the mutex holds it for as
   long as it stays stopped, and strace -f stops each system call, so a scan that read
   /proc under the mutex was stopped there, and its tracer, which needed the mutex to let it
   go on, waited for it forever. A slot taken after the census counts as alive until the
   next scan; past HS_CENSUS_MAX of either kind, the rest wait for the next scan too (a
   larger one costs each thread that takes a census that much more of its stack: 8 bytes
   a pair, threads of 16 KiB stacks run under the shim). */
#define HS_CENSUS_MAX 32
struct hs_census {
    int32_t dead[2 * HS_CENSUS_MAX], stopped[2 * HS_CENSUS_MAX];
    int ndead, nstopped;
};
HS_HIDDEN void hs_census_take(struct hs_census *c);
/* the same of the tokens' holders alone (a read each): how many it found dead or stopped */
HS_HIDDEN int hs_census_holders(struct hs_census *c);
HS_HIDDEN void hs_cs_reclaim(struct hs_cs *cs, int64_t now, const struct hs_census *c);
HS_HIDDEN void hs_reclaim_now(void);  /* runtime.c */
HS_HIDDEN void hs_reclaim_gone(int32_t pid);  /* runtime.c: a child reaped */
HS_HIDDEN int hs_own(int me);  /* the slot is still the calling thread's */
HS_HIDDEN extern int hs_pid;   /* this process's (members.c) */
HS_HIDDEN void hs_acquire(int me);  /* runtime.c: wait for a token, then hold it */

/* one more entry into the shim (the worker's `entries`; its own thread is the only writer):
   a thread that enters it is not in a spin that calls nothing (early.c) */
static inline void hs_entered(void)
{
    int32_t *e = &hs_v.workers[hs_t.slot].entries;
    __atomic_store_n(e, (int32_t)((uint32_t)__atomic_load_n(e, __ATOMIC_RELAXED) + 1u),
                     __ATOMIC_RELAXED);
}

/* whether the calling thread is managed and outside the shim */
static inline int hs_may_enter(void)
{
    return hs_on && hs_t.slot >= 0 && !hs_t.depth;
}

/* Whether the calling thread is managed and outside the shim: then it is inside from now
   (depth 1) until hs_exit. A wrapper that gets 0 calls the real function straight away. */
static inline int hs_enter(void)
{
    if (!hs_may_enter())
        return 0;
    hs_t.depth = 1;
    hs_entered();
    return 1;
}

HS_HIDDEN void hs_pending_rotation(void);

/* The locks a thread holds, as far as the lock functions the shim wraps saw them taken
   (mutexes, rwlocks, spinlocks, OpenMP locks; not a program's own atomics): an unlock is
   a scheduling point (hs_release_point) only where it leaves none, since a thread that
   rotated holding one would keep it from the thread given its token, which may spin for
   it. `r` is the lock call's result, 0 when taken. */
static inline int hs_took(int r)
{
    hs_t.held += r == 0;
    return r;
}

/* whether a rotation asked for is due here: the watchdog's always, a sibling's where the
   thread holds no spinlock */
static inline int hs_rotation_due(void)
{
    return __builtin_expect(hs_t.pending, 0)
           && (hs_t.pending == HS_PEND_NOW || hs_t.spinning == 0);
}

static inline void hs_gave(int r)
{
    if (r == 0 && hs_t.held > 0)
        hs_t.held--;
}

static inline void hs_exit(void)
{
    if (hs_rotation_due())
        hs_pending_rotation();
    hs_t.depth = 0;
    if (hs_t.armed && hs_t.selector != 1)
        hs_t.selector = 1;  /* HS_SUD_BLOCK: armed again after a call it let run natively */
}

/* counters of the job row (hs_count) */
enum { HS_C_THREADS, HS_C_CALLS, HS_C_GRANTS, HS_C_HANDOFFS, HS_C_TRAPS, HS_C_NUDGES,
       HS_C_UNMANAGED };

/* sud.c: Syscall User Dispatch */
#define HS_SUD_ALLOW 0
#define HS_SUD_BLOCK 1
HS_HIDDEN int hs_sud_setup(void);      /* find libc's text, install the SIGSYS handler */
HS_HIDDEN void hs_sud_arm(void);       /* arm it for the calling thread */
HS_HIDDEN void hs_sud_disarm(void);
HS_HIDDEN int hs_nudge_signal(void);
HS_HIDDEN int hs_signals_setup(void);
HS_HIDDEN void hs_signals_start(void); /* after the thread has its slot (sud.c says why) */
HS_HIDDEN void hs_nudge_hold(void);    /* ignored across an exec (sud.c says why) */
HS_HIDDEN void hs_exec_affinity(int before);  /* the program's own mask across an exec */
HS_HIDDEN void hs_nudge_resume(void);
HS_HIDDEN int hs_own_signal(int sig);  /* SIGSYS (when armed) or the nudge signal */
HS_HIDDEN void hs_keep_unblocked(void *set);
HS_HIDDEN int hs_app_sigaction(int sig, const struct sigaction *act, struct sigaction *old);

/* real functions behind the interposed ones (wrappers.c resolves them) */
extern int (*hs_real_mutex_lock)(pthread_mutex_t *);
extern int (*hs_real_mutex_unlock)(pthread_mutex_t *);
extern int (*hs_real_mutex_consistent)(pthread_mutex_t *);
extern int (*hs_real_mutex_timedlock)(pthread_mutex_t *, const struct timespec *);
extern long (*hs_real_syscall)(long, ...);
extern int (*hs_real_setaffinity)(pid_t, size_t, const cpu_set_t *);
extern int (*hs_real_getaffinity)(pid_t, size_t, cpu_set_t *);
extern int (*hs_real_sigaction)(int, const struct sigaction *, struct sigaction *);
extern int (*hs_real_poll)(struct pollfd *, nfds_t, int);

#endif
