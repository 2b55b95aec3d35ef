/* The interposed libc functions, part 1: barriers, semaphores, joins (locks and condition
   variables: wrap_locks.c), and futex waits through syscall() and through the trap. Each call
   that can block gives the calling thread's token up before it blocks and takes one again
   after (hs_park / hs_resume); a call that would not block (a free mutex, a posted
   semaphore, an ended thread) is tried first and costs no token. Calls from threads the
   shim does not manage, or from inside the shim, go straight to libc. */
#include "wrap.h"

REAL(int, pthread_mutex_lock, (pthread_mutex_t *));
REAL(int, pthread_mutex_unlock, (pthread_mutex_t *));
REAL(int, pthread_mutex_consistent, (pthread_mutex_t *));
REAL(int, pthread_mutex_timedlock, (pthread_mutex_t *, const struct timespec *));
REAL(long, syscall, (long, ...));
REAL(int, sched_setaffinity, (pid_t, size_t, const cpu_set_t *));
REAL(int, sched_getaffinity, (pid_t, size_t, cpu_set_t *));
REAL(int, sigaction, (int, const struct sigaction *, struct sigaction *));
REAL(int, poll, (struct pollfd *, nfds_t, int));

int (*hs_real_mutex_lock)(pthread_mutex_t *);
int (*hs_real_mutex_unlock)(pthread_mutex_t *);
int (*hs_real_mutex_consistent)(pthread_mutex_t *);
int (*hs_real_mutex_timedlock)(pthread_mutex_t *, const struct timespec *);
long (*hs_real_syscall)(long, ...);
int (*hs_real_setaffinity)(pid_t, size_t, const cpu_set_t *);
int (*hs_real_getaffinity)(pid_t, size_t, cpu_set_t *);
int (*hs_real_sigaction)(int, const struct sigaction *, struct sigaction *);
int (*hs_real_poll)(struct pollfd *, nfds_t, int);

void hs_resolve(void)
{
    hs_real_mutex_lock = R(pthread_mutex_lock);
    hs_real_mutex_unlock = R(pthread_mutex_unlock);
    hs_real_mutex_consistent = R(pthread_mutex_consistent);
    hs_real_mutex_timedlock = R(pthread_mutex_timedlock);
    hs_real_syscall = R(syscall);
    hs_real_setaffinity = R(sched_setaffinity);
    hs_real_getaffinity = R(sched_getaffinity);
    hs_real_sigaction = R(sigaction);
    hs_real_poll = R(poll);
}

/* --- locks, condition variables, barriers, semaphores, joins ---------------------------- */


REAL(int, pthread_barrier_wait, (pthread_barrier_t *));

HS_EXPORT int pthread_barrier_wait(pthread_barrier_t *b)
{
    ENTER_PARKED(int, R(pthread_barrier_wait)(b));
}

REAL(int, sem_trywait, (sem_t *));
REAL(int, sem_wait, (sem_t *));
REAL(int, sem_timedwait, (sem_t *, const struct timespec *));
REAL(int, sem_clockwait, (sem_t *, clockid_t, const struct timespec *));

HS_EXPORT int sem_wait(sem_t *s)
{
    ENTER_TRY_THEN_PARK(int, R(sem_trywait)(s), p_ == 0 || errno != EAGAIN, R(sem_wait)(s));
}

HS_EXPORT int sem_timedwait(sem_t *s, const struct timespec *t)
{
    ENTER_TRY_THEN_PARK(int, R(sem_trywait)(s), p_ == 0 || errno != EAGAIN, R(sem_timedwait)(s, t));
}

HS_EXPORT int sem_clockwait(sem_t *s, clockid_t c, const struct timespec *t)
{
    ENTER_TRY_THEN_PARK(int, R(sem_trywait)(s), p_ == 0 || errno != EAGAIN,
                        R(sem_clockwait)(s, c, t));
}

REAL(int, pthread_tryjoin_np, (pthread_t, void **));
REAL(int, pthread_join, (pthread_t, void **));
REAL(int, pthread_timedjoin_np, (pthread_t, void **, const struct timespec *));
REAL(int, pthread_clockjoin_np, (pthread_t, void **, clockid_t, const struct timespec *));

HS_EXPORT int pthread_join(pthread_t t, void **ret)
{
    ENTER_TRY_THEN_PARK(int, R(pthread_tryjoin_np)(t, ret), p_ != EBUSY, R(pthread_join)(t, ret));
}

HS_EXPORT int pthread_timedjoin_np(pthread_t t, void **ret, const struct timespec *ts)
{
    ENTER_TRY_THEN_PARK(int, R(pthread_tryjoin_np)(t, ret), p_ != EBUSY,
                        R(pthread_timedjoin_np)(t, ret, ts));
}

HS_EXPORT int pthread_clockjoin_np(pthread_t t, void **ret, clockid_t c, const struct timespec *ts)
{
    ENTER_TRY_THEN_PARK(int, R(pthread_tryjoin_np)(t, ret), p_ != EBUSY,
                        R(pthread_clockjoin_np)(t, ret, c, ts));
}

/* --- futexes through syscall() (libomp, TBB, ...) and through the trap (libgomp) -------- */

/* Before a futex wait parks: while no thread waits for a token, nobody wants this thread's
   CPU, so it spins on the word for up to IDLE_SPIN_NS, as the runtime would have without
   the passive wait policy coop sets. At J = 1 a barrier's waits then mostly end without
   the sleep and the wake-up (tens of µs on a VM whose idle CPU halts): the OpenMP barrier
   loop alone ran 1.074 ± 0.009 times faster, 25 parks per job instead of 388. The spin
   stops as soon as a thread waits for a token, but a thread being woken is not waiting
   yet, and a longer spin delays it: at 50 µs two co-located barrier loops lost 4-5 %, at
   10-30 µs nothing measurable. A timed wait's own timeout starts after the spin (at most
   this much later). */
#define IDLE_SPIN_NS 20000

/* The program has a signal handler that interrupts a futex wait (one installed without
   SA_RESTART): the wait must then end with EINTR when the signal comes while it waits,
   which a spin in user space would not do, so there is no spin in such a process. */
static int interrupting_handler;

void hs_note_handler(int sig, const void *handler, unsigned long flags)
{
    if (handler != (const void *)SIG_DFL && handler != (const void *)SIG_IGN
        && !(flags & SA_RESTART) && !hs_own_signal(sig))
        __atomic_store_n(&interrupting_handler, 1, __ATOMIC_RELAXED);
}

struct futex_word {
    const int32_t *word;
    int32_t val;
};

static int word_changed(void *arg)
{
    struct futex_word *f = arg;
    return __atomic_load_n(f->word, __ATOMIC_ACQUIRE) != f->val;
}

static int idle_spin(const int32_t *word, int32_t val)
{
    struct futex_word f = {word, val};
    return !__atomic_load_n(&interrupting_handler, __ATOMIC_RELAXED)
           && hs_spin(word_changed, &f, IDLE_SPIN_NS);
}

long hs_futex(long a1, long a2, long a3, long a4, long a5, long a6)
{
    int op = (int)a2 & FUTEX_CMD_MASK;
    int waits = op == FUTEX_WAIT || op == FUTEX_WAIT_BITSET || op == FUTEX_LOCK_PI
                || op == FUTEX_LOCK_PI2 || op == FUTEX_WAIT_REQUEUE_PI;
    if (!waits || !hs_enter())
        return hs_raw(SYS_futex, a1, a2, a3, a4, a5, a6);
    if ((op == FUTEX_WAIT || (op == FUTEX_WAIT_BITSET && a6)) && a1 && !(a1 & 3)) {
        /* Whether the word still holds the value, asked of the kernel without waiting (a
           requeue of nobody that compares the word first): EAGAIN (it changed) and EFAULT
           (it cannot be read, where the shim's own read would crash the program) end the
           call as the wait would have. Not a wait with a zero timeout: that one sleeps for
           the thread's timer slack, 50 µs by default. */
        long same = hs_raw(SYS_futex, a1, FUTEX_CMP_REQUEUE | ((int)a2 & FUTEX_PRIVATE_FLAG), 0,
                           0, a1, a3);
        if (same != 0) {
            hs_exit();
            return same;
        }
        if (idle_spin((const int32_t *)a1, (int32_t)a3)) {
            hs_exit();  /* it changed while we spun with nobody wanting our CPU */
            return -EAGAIN;
        }
    }
    hs_park();
    long r = hs_raw(SYS_futex, a1, a2, a3, a4, a5, a6);
    hs_resume();
    hs_exit();
    return r;
}

HS_EXPORT long syscall(long nr, ...)
{
    va_list ap;
    va_start(ap, nr);
    long a1 = va_arg(ap, long), a2 = va_arg(ap, long), a3 = va_arg(ap, long);
    long a4 = va_arg(ap, long), a5 = va_arg(ap, long), a6 = va_arg(ap, long);
    va_end(ap);
    long r;
    if (nr == SYS_rt_sigaction)
        hs_note_rt_sigaction(a1, a2);
    if (nr == SYS_futex) {
        r = hs_futex(a1, a2, a3, a4, a5, a6);
    } else if (nr == SYS_futex_waitv && hs_enter()) {
        hs_park();
        r = hs_raw(nr, a1, a2, a3, a4, a5, a6);
        hs_resume();
        hs_exit();
    } else {
        return R(syscall)(nr, a1, a2, a3, a4, a5, a6);
    }
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return -1;
    }
    return r;
}
