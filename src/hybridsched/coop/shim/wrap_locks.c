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

/* Waits, without taking the lock, until its word is seen free: 1, or 0 where the word held
   a value of no known state. Marks it as having sleepers first, so that the unlock wakes. */
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
        hs_raw(SYS_futex, (long)w.word, w.op, w.sleepers, 0, 0, 0);
    }
}

int hs_take_with_token(struct hs_lockword w, int (*attempt)(void *), void *arg)
{
    int e = errno, slept = 0;
    char selector = hs_t.selector;
    hs_t.selector = HS_SUD_ALLOW;
    do {
        hs_park();
        int seen = wait_unheld(w);
        hs_resume();
        if (!seen) {
            hs_t.selector = selector;
            errno = e;
            return 0;
        }
        slept = 1;
    } while (!attempt(arg));
    if (slept) {  /* its wake may have been the one a sleeper still asleep needed: the duty passes */
        int held = 1;
        __atomic_compare_exchange_n(w.word, &held, w.sleepers, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    }
    hs_t.selector = selector;
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

/* glibc's internal flag of a process-shared mutex in __kind (nptl's pthreadP.h) */
#define GLIBC_MUTEX_PSHARED 128

/* The mutexes of glibc's four plain kinds (normal, recursive, error-checking, adaptive),
   private or process-shared: their __lock is 0 free, 1 held, 2 held with sleepers (nptl's
   lowlevellock). Robust, priority-inheriting or -protecting and elided ones: 0. */
static int plain_mutex(pthread_mutex_t *m, struct hs_lockword *w)
{
    int kind = m->__data.__kind;
    if (kind & ~(PTHREAD_MUTEX_ADAPTIVE_NP | GLIBC_MUTEX_PSHARED))
        return 0;
    if ((kind & 3) == PTHREAD_MUTEX_ERRORCHECK_NP && m->__data.__owner == hs_t.tid)
        return 0;  /* libc's lock answers EDEADLK */
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

HS_EXPORT int pthread_mutex_lock(pthread_mutex_t *m)
{
    if (!hs_enter())
        return R(pthread_mutex_lock)(m);
    struct mutex_try t = {m, 0};
    if (mutex_attempt(&t) || mutex_taken(m, &t.rc)) {
        hs_exit();
        return t.rc;
    }
    PARKED(int, R(pthread_mutex_lock)(m));
}

HS_EXPORT int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *t)
{
    ENTER_TRY_THEN_PARK(int, R(pthread_mutex_trylock)(m), p_ != EBUSY,
                        R(pthread_mutex_timedlock)(m, t));
}

HS_EXPORT int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t c, const struct timespec *t)
{
    ENTER_TRY_THEN_PARK(int, R(pthread_mutex_trylock)(m), p_ != EBUSY,
                        R(pthread_mutex_clocklock)(m, c, t));
}

HS_EXPORT int pthread_mutex_unlock(pthread_mutex_t *m)
{
    int r = R(pthread_mutex_unlock)(m);
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
   the thread is woken: a plain mutex is let go and taken back with a token (a longer wait
   to the caller, who tests its predicate again under the mutex anyway); another kind is
   kept, and the token waited for holding it, as before. */
static int cond_waited(int r, pthread_mutex_t *m)
{
    int e = errno, rc;
    struct hs_lockword w;
    if (plain_mutex(m, &w) && R(pthread_mutex_unlock)(m) == 0) {
        hs_resume();
        struct mutex_try t = {m, 0};
        if (!mutex_attempt(&t) && !mutex_taken(m, &rc)) {
            hs_park();
            R(pthread_mutex_lock)(m);
            hs_resume();
        }
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

HS_EXPORT int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    COND_WAIT(R(pthread_cond_wait)(c, m));
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
