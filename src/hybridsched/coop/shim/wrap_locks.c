/* The interposed libc functions, part 5: glibc's mutexes, and the condition variables that
   take a mutex back. A thread that waits for a lock is woken when it is let go, and libc
   takes it for the thread right then, token or not; the thread then waits for a token
   holding the lock, and a sibling that holds one finds the lock taken and parks too: lock-
   holder preemption, made by the shim. For the locks whose word follows the common futex
   protocol, the shim waits for the lock to be let go without taking it, and takes it
   only holding a token (hs_take_with_token, also used by wrap_omp.c); an unlock is then
   the holder's scheduling point (hs_release_point). Other locks keep libc's own wait,
   parked around it. */
#include "wrap.h"

/* Waits, without taking the lock, until it is let go: 1 once its word is seen free or an
   unlock woke this thread, 0 where the word held a value of no known state. Marks it as
   having sleepers first, so that the unlock wakes.

   A wake-up is enough, the word not looked at again: a hot lock's holder takes it back
   within a few hundred ns of letting it go, so a woken thread that went back to sleep
   while it found the lock held again was woken by the very next unlock, and the next: a
   futex wake by the holder and a wake-up of this tokenless thread, which preempts a
   token holder, every round (two jobs at 90 % of their time in the lock: ~9 000
   involuntary switches a job a run, ~230 since, and 7 % slower than env). Woken, it
   waits for a token instead, and only then tries the lock again: the holder's unlocks
   are no system calls meanwhile. */
static int wait_unheld(struct hs_lockword w)
{
    for (;;) {
        int v = __atomic_load_n(w.word, __ATOMIC_ACQUIRE);
        if (v == 0)
            return 1;
        if (v != 1 && v != w.sleepers)
            return 0;
        if (v == 1 && !__atomic_compare_exchange_n(w.word, &v, w.sleepers, 0, __ATOMIC_RELAXED,
                                                   __ATOMIC_RELAXED))
            continue;
        if (hs_raw(SYS_futex, (long)w.word, w.op, w.sleepers, 0, 0, 0) == 0)
            return 1;  /* woken: an unlock let it go (EAGAIN, EINTR: look again) */
    }
}

/* whether another thread of this job runs holding a token: the one likely to change a
   word we wait on. Without one, the thread that will change it is asleep, or waits for a
   CPU — maybe this very one, where Linux would not preempt a spinner for it within the
   spin (two threads ping-ponging on one token took 48 µs a round trip instead of 7), and
   at J = 2 a spin while another job's thread held the other token only delayed whoever
   was woken. */
static int sibling_runs(void)
{
    int me = hs_t.slot;
    for (int ci = 0; ci < hs_v.ncpu; ci++) {
        int h = hs_v.cpus[ci].holder;
        if (h >= 0 && h != me && hs_v.workers[h].job == hs_job
            && hs_ld(&hs_v.workers[h].state) == HS_RUNNING)
            return 1;
    }
    return 0;
}

/* whether a spin may go on: nobody wants this thread's CPU (no thread waits for a token)
   and a sibling runs */
static int spin_wanted(void)
{
    return hs_ld(&hs_v.h->waiting) <= 0 && sibling_runs();
}

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define CPU_RELAX() __asm__ __volatile__("" ::: "memory")
#endif

/* up to `ns` of spinning until done(arg), while go_on() holds (always where it is NULL) */
static int spin_for(int (*done)(void *), void *arg, int64_t ns, int (*go_on)(void))
{
    if (go_on && !go_on())
        return 0;
    int64_t until = hs_now_ns() + ns;
    for (unsigned i = 1;; i++) {
        if (done(arg))
            return 1;
        CPU_RELAX();
        /* the clock and the tables every 32 pauses (~1-4 µs): cheap, and prompt enough */
        if ((i & 31) == 0 && (hs_now_ns() >= until || (go_on && !go_on())))
            return 0;
    }
}

int hs_spin(int (*done)(void *), void *arg, int64_t ns)
{
    return spin_for(done, arg, ns, spin_wanted);
}

int hs_spin_regardless(int (*done)(void *), void *arg, int64_t ns)
{
    return spin_for(done, arg, ns, NULL);
}

/* Before a held lock's wait parks: while nobody waits for a token and a sibling runs
   holding one (most likely the lock's holder, which the shim never rotates while it holds
   a lock it saw taken), the lock is spun on (hs_spin) for up to LOCK_SPIN_NS, keeping the
   token, and taken as soon as it is seen free. A park costs a token hand-off (3-7 µs measured by
   bench_shim here) and a wake-up by the unlock; spinning for at most about that much costs
   at most about twice the better of the two, and a critical section of a few µs is then
   waited out with no system call at all. Under the passive wait policy coop sets, an
   OpenMP lock loop alone with half its work inside the lock ran 1.6-2x slower than with
   libgomp's own spin (J = 1). While a thread waits for a token there is no spin: the park
   hands this token to it, and a job whose threads hold all the tokens while they queue
   for one lock would keep another job's thread off the CPU until the quantum's end. */
/* LOCK_SPIN_NS is in wrap.h: the spinlocks' wait (wrap_rwlocks.c) uses it too */

struct lock_spin {
    struct hs_lockword w;
    int (*attempt)(void *);
    void *arg;
};

static int lock_taken(void *arg)
{
    struct lock_spin *l = arg;  /* the word read first: no write to the holder's line meanwhile */
    return __atomic_load_n(l->w.word, __ATOMIC_RELAXED) == 0 && l->attempt(l->arg);
}

/* The spin comes again after each wake-up that found the lock taken: a waiter woken by an
   unlock is often too late, its holder already back in (two threads alone, 90 % of each
   round in the lock: woken ~50 µs after the unlock, it parked again at once, each round,
   and the job left 38 % of its CPUs idle, 0.87x of libgomp's own spin). */
int hs_take_with_token(struct hs_lockword w, int (*attempt)(void *), void *arg)
{
    int e = errno, slept = 0;
    struct lock_spin l = {w, attempt, arg};
    char selector = hs_t.selector;
    while (!hs_spin(lock_taken, &l, LOCK_SPIN_NS)) {
        hs_t.selector = HS_SUD_ALLOW;
        hs_park();
        int seen = wait_unheld(w);
        hs_resume();
        hs_t.selector = selector;
        if (!seen) {
            errno = e;
            return 0;
        }
        slept = 1;
        if (attempt(arg))
            break;
    }
    if (slept) {  /* its wake may have been the one a sleeper still asleep needed: the duty passes */
        int held = 1;
        __atomic_compare_exchange_n(w.word, &held, w.sleepers, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    }
    errno = e;
    return 1;
}

/* resolved here on first use, not by hs_resolve: another library's constructor may lock a
   mutex before the shim's own has run */
REAL(int, pthread_mutex_lock, (pthread_mutex_t *));
REAL(int, pthread_mutex_unlock, (pthread_mutex_t *));
REAL(int, pthread_mutex_trylock, (pthread_mutex_t *));
REAL(int, pthread_mutex_timedlock, (pthread_mutex_t *, const struct timespec *));
REAL(int, pthread_mutex_clocklock, (pthread_mutex_t *, clockid_t, const struct timespec *));

/* glibc's internal flags in __kind (nptl's pthreadP.h): a process-shared mutex, and one
   never elided (pthread_mutexattr_settype sets it with any type it is given) */
#define GLIBC_MUTEX_PSHARED 128
#define GLIBC_MUTEX_NO_ELISION 512

static int plain_kind(int kind)
{
    return !(kind & ~(PTHREAD_MUTEX_ADAPTIVE_NP | GLIBC_MUTEX_PSHARED | GLIBC_MUTEX_NO_ELISION));
}

/* The mutexes of glibc's four plain kinds (normal, recursive, error-checking, adaptive),
   private or process-shared: their __lock is 0 free, 1 held, 2 held with sleepers (nptl's
   lowlevellock). Robust, priority-inheriting or -protecting and elided ones, and a lock
   by its owner: 0. */
static int plain_mutex(pthread_mutex_t *m, struct hs_lockword *w)
{
    int kind = m->__data.__kind;
    if (!plain_kind(kind) || m->__data.__owner == hs_t.tid)
        return 0;  /* the owner's own lock: libc's answer (EDEADLK, or the wait it hangs in) */
    *w = (struct hs_lockword){&m->__data.__lock, 2,
                              kind & GLIBC_MUTEX_PSHARED ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE};
    return 1;
}

struct mutex_try {
    pthread_mutex_t *m;
    int rc;
};

static int mutex_attempt(void *arg)
{
    struct mutex_try *t = arg;
    t->rc = R(pthread_mutex_trylock)(t->m);
    return t->rc != EBUSY;
}

/* a plain mutex that is held, taken only with a token; 0: not done (another kind) */
static int mutex_taken(pthread_mutex_t *m, int *rc)
{
    struct hs_lockword w;
    struct mutex_try t = {m, 0};
    if (!plain_mutex(m, &w) || !hs_take_with_token(w, mutex_attempt, &t))
        return 0;
    *rc = t.rc;
    return 1;
}

/* inside the shim: a free mutex taken with the token kept, a held plain one only with a
   token again, another kind by libc's own wait, parked */
static int lock_inside(pthread_mutex_t *m)
{
    struct mutex_try t = {m, 0};
    if (mutex_attempt(&t) || mutex_taken(m, &t.rc))
        return t.rc;
    hs_park();
    t.rc = R(pthread_mutex_lock)(m);
    hs_resume();
    return t.rc;
}

static int mutex_lock(pthread_mutex_t *m)
{
    if (!hs_enter())
        return R(pthread_mutex_lock)(m);
    int e = errno, r = lock_inside(m);
    hs_exit();
    errno = e;
    return r;
}

static int mutex_timedlock(pthread_mutex_t *m, const struct timespec *t)
{
    ENTER_TRY_THEN_PARK(int, R(pthread_mutex_trylock)(m), p_ != EBUSY,
                        R(pthread_mutex_timedlock)(m, t));
}

static int mutex_clocklock(pthread_mutex_t *m, clockid_t c, const struct timespec *t)
{
    ENTER_TRY_THEN_PARK(int, R(pthread_mutex_trylock)(m), p_ != EBUSY,
                        R(pthread_mutex_clocklock)(m, c, t));
}

HS_EXPORT int pthread_mutex_lock(pthread_mutex_t *m) { return hs_took(mutex_lock(m)); }
HS_EXPORT int pthread_mutex_trylock(pthread_mutex_t *m)
{
    return hs_took(R(pthread_mutex_trylock)(m));
}
HS_EXPORT int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *t)
{
    return hs_took(mutex_timedlock(m, t));
}
HS_EXPORT int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t c, const struct timespec *t)
{
    return hs_took(mutex_clocklock(m, c, t));
}

HS_EXPORT int pthread_mutex_unlock(pthread_mutex_t *m)
{
    int r = R(pthread_mutex_unlock)(m);
    hs_gave(r);
    if (r == 0 && hs_enter()) {
        hs_release_point();
        hs_exit();
    }
    return r;
}

REAL(int, pthread_cond_wait, (pthread_cond_t *, pthread_mutex_t *));
REAL(int, pthread_cond_timedwait, (pthread_cond_t *, pthread_mutex_t *, const struct timespec *));
REAL(int, pthread_cond_clockwait, (pthread_cond_t *, pthread_mutex_t *, clockid_t, const struct timespec *));

/* After a condition variable's wait, which glibc ends by taking the mutex back as soon as
   the thread is woken: a plain mutex (of any plain kind: the thread owns it here, which
   plain_mutex would refuse) is let go and taken back with a token (a longer wait
   to the caller, who tests its predicate again under the mutex anyway); another kind is
   kept, and the token waited for holding it, as before. */
static int cond_waited(int r, pthread_mutex_t *m)
{
    int e = errno;
    if (plain_kind(m->__data.__kind) && R(pthread_mutex_unlock)(m) == 0) {
        hs_resume();
        lock_inside(m);
    } else {
        hs_resume();
    }
    hs_exit();
    errno = e;
    return r;
}

#define COND_WAIT(call)                                                                       \
    do {                                                                                      \
        if (!hs_enter())                                                                      \
            return call;                                                                      \
        hs_park();                                                                            \
        return cond_waited(call, m);                                                          \
    } while (0)

/* An untimed condition variable's wait while nobody waits for a token and a sibling runs
   (the thread likely to signal) first spins, the mutex let go, until the variable is
   signalled: pthread_cond_signal and pthread_cond_broadcast count their calls per
   variable (by address, in a table where two variables may share a count: a false
   wake-up, which POSIX allows). A wait that sleeps costs a futex wake-up when it is
   signalled (tens of µs for an idle vCPU here), and OpenBLAS's pool threads sleep after
   every call under the wait policy coop sets: one numpy job alone (J = 1) ran at
   0.94-0.95 of linux without the spin. The token is kept lazily meanwhile: a thread that
   comes to wait for one takes it and ends the spin, and siblings do not count a spinning
   thread as one that runs (idle pool threads counting each other kept both CPUs spinning:
   a 2-worker pool ran 6x slower). A job with more threads than the node has CPUs, in
   all its processes, never spins: a spinner still holds a CPU, and a thread the kernel
   has woken but that has not yet asked for a token (it needs a CPU to) is not seen
   waiting (a pool of two workers and its caller ran 1.3-1.6x slower; counted per process,
   two such processes of one job 1.24x). Nor does a process-shared variable or mutex: a
   signal from another process is counted there. A spin that ends without a signal
   returns as a spurious wake-up, since a signal sent without the mutex between the
   spin's end and a sleep would be lost, and the caller's next wait on the variable
   sleeps. Timed waits (CPython's
   GIL among them) are left as they are: their deadline would have to be kept through the
   spin. */
#define COND_GENS 1024  /* counts of signals; more: fewer false wake-ups, more memory */
static uint32_t cond_gen[COND_GENS];

static uint32_t *signals_of(const pthread_cond_t *c)
{
    uintptr_t x = (uintptr_t)c;
    return &cond_gen[((x >> 4) ^ (x >> 14)) % COND_GENS];
}

REAL(int, pthread_cond_signal, (pthread_cond_t *));
REAL(int, pthread_cond_broadcast, (pthread_cond_t *));

/* a holder that signals: the gang look's signaller (early.c) */
static void note_signaller(void)
{
    int me = hs_t.slot;
    if (hs_on && me >= 0 && hs_ld(&hs_v.workers[me].state) == HS_RUNNING)
        __atomic_store_n(&hs_last_signaller, me, __ATOMIC_RELAXED);
}

HS_EXPORT int pthread_cond_signal(pthread_cond_t *c)
{
    __atomic_fetch_add(signals_of(c), 1, __ATOMIC_SEQ_CST);
    note_signaller();
    return R(pthread_cond_signal)(c);
}

HS_EXPORT int pthread_cond_broadcast(pthread_cond_t *c)
{
    __atomic_fetch_add(signals_of(c), 1, __ATOMIC_SEQ_CST);
    note_signaller();
    return R(pthread_cond_broadcast)(c);
}

/* A thread's spin allowance: up to COND_SPIN_NS at once, earned back at 1/COND_SPIN_SHARE
   of the time it does not spin, so that a waiter signalled rarely burns at most that share
   of a CPU. Longer bridges longer idle gaps of a job alone on the node (numpy J = 1: 0.98
   of linux at 100 µs, 0.99 at 200 µs); a larger share burns more of a CPU nobody asked
   for. */
#define COND_SPIN_NS 200000
#define COND_SPIN_SHARE 4

struct cond_spin {
    const uint32_t *signals;
    uint32_t seen;
};

static int spin_over(void *arg)
{
    const struct cond_spin *s = arg;
    return __atomic_load_n(s->signals, __ATOMIC_ACQUIRE) != s->seen
           || hs_ld(&hs_v.workers[hs_t.slot].state) != HS_LAZY || !sibling_runs();
}

/* the spin allowance now: earned back since the last look, up to the whole */
static int64_t spin_allowed(int64_t now)
{
    if (hs_t.spin_at == 0)
        hs_t.spin_left = COND_SPIN_NS;
    else
        hs_t.spin_left += (now - hs_t.spin_at) / COND_SPIN_SHARE;
    if (hs_t.spin_left > COND_SPIN_NS)
        hs_t.spin_left = COND_SPIN_NS;
    hs_t.spin_at = now;
    return hs_t.spin_left;
}

/* whether the job has more threads than the node has CPUs, in all its processes */
static int job_oversubscribed(void)
{
    int n = 0, hi = hs_ld(&hs_v.h->hi);
    for (int w = 0; w < hi; w++)
        if (hs_ld(&hs_v.workers[w].used) == 1 && hs_v.workers[w].job == hs_job && ++n > hs_v.ncpu)
            return 1;
    return 0;
}

/* glibc's process-shared flag in a condition variable's __wrefs (nptl's pthreadP.h) */
#define GLIBC_COND_PSHARED 1

static int cond_spun(pthread_cond_t *c, pthread_mutex_t *m)
{
    int kind = m->__data.__kind;
    if (hs_t.unsignalled == c) {  /* the last spin on it saw no signal: this wait sleeps */
        hs_t.unsignalled = NULL;
        return 0;
    }
    /* a process-shared variable may be signalled from a process whose counts are its own */
    if (!plain_kind(kind) || (kind & 3) == PTHREAD_MUTEX_RECURSIVE_NP
        || (kind & GLIBC_MUTEX_PSHARED)
        || (__atomic_load_n(&c->__data.__wrefs, __ATOMIC_RELAXED) & GLIBC_COND_PSHARED)
        || !spin_wanted() || job_oversubscribed())
        return 0;
    int64_t now = hs_now_ns(), allowed = spin_allowed(now);
    const uint32_t *signals = signals_of(c);
    struct cond_spin s = {signals, __atomic_load_n(signals, __ATOMIC_ACQUIRE)};  /* under the mutex */
    if (allowed <= 0 || !hs_park_lazy())
        return 0;
    if (R(pthread_mutex_unlock)(m) != 0) {
        hs_resume();
        return 0;
    }
    spin_for(spin_over, &s, allowed, NULL);
    hs_resume();
    lock_inside(m);
    if (__atomic_load_n(s.signals, __ATOMIC_ACQUIRE) == s.seen)
        hs_t.unsignalled = c;
    int64_t end = hs_now_ns();
    hs_t.spin_left -= end - now;
    hs_t.spin_at = end;
    return 1;
}

HS_EXPORT int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    if (!hs_enter())
        return R(pthread_cond_wait)(c, m);
    if (cond_spun(c, m)) {
        hs_exit();
        pthread_testcancel();  /* the wait is a cancellation point: acted on with the mutex held */
        return 0;
    }
    hs_park();
    int r = R(pthread_cond_wait)(c, m);
    hs_t.posted = 1;  /* for the gang look of the token wait that follows (early.c) */
    r = cond_waited(r, m);
    hs_t.posted = 0;  /* no token wait followed (a lazily kept token) */
    return r;
}

HS_EXPORT int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t)
{
    COND_WAIT(R(pthread_cond_timedwait)(c, m, t));
}

HS_EXPORT int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t k,
                                     const struct timespec *t)
{
    COND_WAIT(R(pthread_cond_clockwait)(c, m, k, t));
}
