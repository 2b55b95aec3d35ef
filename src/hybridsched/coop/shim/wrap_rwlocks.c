/* The interposed libc functions: read-write locks and pthread spinlocks (mutexes and
   condition variables: wrap_locks.c). */
#include "wrap.h"

/* Read-write locks: a busy one parks; spinlocks: waited for by spinning, which must
   happen holding the token. Both only counted (hs_took, hs_gave), so that an unlock while
   one is held is no scheduling point; their own unlocks are none either. */
#define RWLOCK(kind)                                                                          \
    REAL(int, pthread_rwlock_try##kind##lock, (pthread_rwlock_t *));                         \
    REAL(int, pthread_rwlock_##kind##lock, (pthread_rwlock_t *));                            \
    REAL(int, pthread_rwlock_timed##kind##lock, (pthread_rwlock_t *, const struct timespec *)); \
    REAL(int, pthread_rwlock_clock##kind##lock, (pthread_rwlock_t *, clockid_t, const struct timespec *)); \
    static int kind##lock(pthread_rwlock_t *l)                                                \
    {                                                                                         \
        ENTER_TRY_THEN_PARK(int, R(pthread_rwlock_try##kind##lock)(l), p_ != EBUSY,           \
                            R(pthread_rwlock_##kind##lock)(l));                               \
    }                                                                                         \
    static int timed##kind##lock(pthread_rwlock_t *l, const struct timespec *t)               \
    {                                                                                         \
        ENTER_TRY_THEN_PARK(int, R(pthread_rwlock_try##kind##lock)(l), p_ != EBUSY,           \
                            R(pthread_rwlock_timed##kind##lock)(l, t));                       \
    }                                                                                         \
    static int clock##kind##lock(pthread_rwlock_t *l, clockid_t c, const struct timespec *t)  \
    {                                                                                         \
        ENTER_TRY_THEN_PARK(int, R(pthread_rwlock_try##kind##lock)(l), p_ != EBUSY,           \
                            R(pthread_rwlock_clock##kind##lock)(l, c, t));                    \
    }                                                                                         \
    HS_EXPORT int pthread_rwlock_##kind##lock(pthread_rwlock_t *l)                           \
    {                                                                                         \
        return hs_took(kind##lock(l));                                                        \
    }                                                                                         \
    HS_EXPORT int pthread_rwlock_try##kind##lock(pthread_rwlock_t *l)                        \
    {                                                                                         \
        return hs_took(R(pthread_rwlock_try##kind##lock)(l));                                 \
    }                                                                                         \
    HS_EXPORT int pthread_rwlock_timed##kind##lock(pthread_rwlock_t *l, const struct timespec *t) \
    {                                                                                         \
        return hs_took(timed##kind##lock(l, t));                                              \
    }                                                                                         \
    HS_EXPORT int pthread_rwlock_clock##kind##lock(pthread_rwlock_t *l, clockid_t c,          \
                                                   const struct timespec *t)                  \
    {                                                                                         \
        return hs_took(clock##kind##lock(l, c, t));                                           \
    }
RWLOCK(rd)
RWLOCK(wr)

REAL(int, pthread_rwlock_unlock, (pthread_rwlock_t *));
REAL(int, pthread_spin_lock, (pthread_spinlock_t *));
REAL(int, pthread_spin_trylock, (pthread_spinlock_t *));
REAL(int, pthread_spin_unlock, (pthread_spinlock_t *));

HS_EXPORT int pthread_rwlock_unlock(pthread_rwlock_t *l)
{
    int r = R(pthread_rwlock_unlock)(l);
    hs_gave(r);
    return r;
}

static int spin_took(int r)
{
    hs_t.spinning += r == 0;
    return hs_took(r);
}

/* a spinlock and its word as last seen held: tried again only once the word has changed
   (read first, as in lock_taken: no write to the holder's line meanwhile). Which value
   means free is glibc's own (0 in its generic code, 1 in its x86_64 assembly, where a
   waiter's failed attempt changes the word too and costs one more try), so only a change
   is looked for; and every 64th look tries anyway, since the word read before a failed
   try may have been free, and be free again (taken and given back between two looks). */
struct spin_seen {
    pthread_spinlock_t *s;
    int word;
    unsigned looks;
};

static int spinlock_taken(void *arg)
{
    struct spin_seen *p = arg;
    int w = __atomic_load_n((volatile int *)p->s, __ATOMIC_RELAXED);
    if (w == p->word && (++p->looks & 63))
        return 0;
    if (R(pthread_spin_trylock)(p->s) == 0)
        return 1;
    p->word = w;
    return 0;
}

/* A held spinlock is spun for holding the token, as libc would (there is nothing to sleep
   on), LOCK_SPIN_NS at a time; between two such spins, while a thread waits for a token,
   the wait is a scheduling point: the token goes to a waiting thread (the holder first, if
   it is one of them), and the spin goes on, the spinlock tried first, once a token comes
   back. Without the turns, two jobs whose threads wait for their own spinlocks held 90 %
   of the time kept a CPU each spinning while the other job's threads waited for a token,
   until the watchdog's bound. Turning at once, before each spin, made many waiters pass
   the tokens among themselves without ever trying the lock (16 waiters: a livelock, 22
   million hand-offs); a spin between turns bounds them to one per LOCK_SPIN_NS a waiter.
   The spinlock is counted as held before the shim is left (hs_exit), so that a rotation
   asked for meanwhile waits for its unlock. */
static int spin_lock_waited(pthread_spinlock_t *s)
{
    struct spin_seen p = {s, __atomic_load_n((volatile int *)s, __ATOMIC_RELAXED), 0};
    if (R(pthread_spin_trylock)(s) == 0)
        return spin_took(0);
    if (!hs_enter())
        return spin_took(R(pthread_spin_lock)(s));
    int me = hs_t.slot;
    while (!hs_spin_regardless(spinlock_taken, &p, LOCK_SPIN_NS)) {  /* whoever waits, as libc */
        if (hs_ld(&hs_v.h->waiting) > 0 && hs_ld(&hs_v.workers[me].state) == HS_RUNNING) {
            hs_rotate();
            p.looks = 63;  /* the next look tries, whatever the word */
        }
    }
    spin_took(0);
    hs_exit();
    return 0;
}

HS_EXPORT int pthread_spin_lock(pthread_spinlock_t *s) { return spin_lock_waited(s); }
HS_EXPORT int pthread_spin_trylock(pthread_spinlock_t *s)
{
    return spin_took(R(pthread_spin_trylock)(s));
}
/* no scheduling point of its own, but where a sibling's request to rotate, deferred while
   the thread held a spinlock, is answered once it holds none (HS_PEND_UNHELD) */
HS_EXPORT int pthread_spin_unlock(pthread_spinlock_t *s)
{
    int r = R(pthread_spin_unlock)(s);
    hs_gave(r);
    if (r == 0 && hs_t.spinning > 0)
        hs_t.spinning--;
    if (hs_rotation_due() && hs_enter())
        hs_exit();
    return r;
}
