/* The interposed libc functions: each call that can block gives the calling thread's token
   up before it blocks and takes one again after (hs_park / hs_resume); a call that would
   not block (a free mutex, a posted semaphore, a ready descriptor, a reaped child) is
   tried first and costs no token at all. Calls from threads the shim does not manage, or
   from inside the shim, go straight to libc. */
#include "coop.h"
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef FUTEX_LOCK_PI2
#define FUTEX_LOCK_PI2 13
#endif
#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif

static void *sym(const char *name)
{
    void *p = NULL;
    if (strncmp(name, "pthread_cond_", 13) == 0)  /* the condition variables of glibc >= 2.3.2 */
        p = dlvsym(RTLD_NEXT, name, "GLIBC_2.3.2");
    return p ? p : dlsym(RTLD_NEXT, name);
}

#define REAL(ret, name, params) static ret(*real_##name) params
#define R(name)                                                                               \
    ({                                                                                        \
        if (__builtin_expect(!real_##name, 0))                                                \
            real_##name = (__typeof__(real_##name))sym(#name);                                \
        real_##name;                                                                          \
    })

/* give the token up around `call`, keeping the call's errno */
#define PARKED(type, call)                                                                    \
    do {                                                                                      \
        type r_;                                                                              \
        int e_;                                                                               \
        hs_park();                                                                            \
        r_ = (call);                                                                          \
        e_ = errno;                                                                           \
        hs_resume();                                                                          \
        hs_exit();                                                                            \
        errno = e_;                                                                           \
        return r_;                                                                            \
    } while (0)

/* try `probe` (the call that never blocks) first: done if `done`, else park around `call` */
#define TRY_THEN_PARK(type, probe, done, call)                                                \
    do {                                                                                      \
        type p_ = (probe);                                                                    \
        if (done) {                                                                           \
            hs_exit();                                                                        \
            return p_;                                                                        \
        }                                                                                     \
        PARKED(type, call);                                                                   \
    } while (0)

REAL(int, pthread_mutex_lock, (pthread_mutex_t *));
REAL(int, pthread_mutex_unlock, (pthread_mutex_t *));
REAL(int, pthread_mutex_consistent, (pthread_mutex_t *));
REAL(ssize_t, read, (int, void *, size_t));
REAL(long, syscall, (long, ...));
REAL(int, sched_setaffinity, (pid_t, size_t, const cpu_set_t *));
REAL(int, sched_getaffinity, (pid_t, size_t, cpu_set_t *));
REAL(int, sigaction, (int, const struct sigaction *, struct sigaction *));
REAL(int, poll, (struct pollfd *, nfds_t, int));

int (*hs_real_mutex_lock)(pthread_mutex_t *);
int (*hs_real_mutex_unlock)(pthread_mutex_t *);
int (*hs_real_mutex_consistent)(pthread_mutex_t *);
ssize_t (*hs_real_read)(int, void *, size_t);
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
    hs_real_read = R(read);
    hs_real_syscall = R(syscall);
    hs_real_setaffinity = R(sched_setaffinity);
    hs_real_getaffinity = R(sched_getaffinity);
    hs_real_sigaction = R(sigaction);
    hs_real_poll = R(poll);
}

/* a descriptor that is not ready, in blocking mode: the call would sleep */
static int would_block(int fd, short events)
{
    struct pollfd p = {fd, events, 0};
    int e = errno;
    int blocks = R(poll)(&p, 1, 0) == 0 && !(fcntl(fd, F_GETFL) & O_NONBLOCK);
    errno = e;
    return blocks;
}

#define BLOCKING_IO(type, name, fd, events, skip, args)                                      \
    do {                                                                                      \
        if (!hs_enter())                                                                      \
            return R(name) args;                                                              \
        if ((skip) || !would_block(fd, events)) {                                            \
            hs_exit();                                                                        \
            return R(name) args;                                                              \
        }                                                                                     \
        PARKED(type, R(name) args);                                                           \
    } while (0)

/* --- locks, condition variables, barriers, semaphores, joins ---------------------------- */

REAL(int, pthread_mutex_trylock, (pthread_mutex_t *));
REAL(int, pthread_mutex_timedlock, (pthread_mutex_t *, const struct timespec *));
REAL(int, pthread_mutex_clocklock, (pthread_mutex_t *, clockid_t, const struct timespec *));

HS_EXPORT int pthread_mutex_lock(pthread_mutex_t *m)
{
    if (!hs_enter())
        return R(pthread_mutex_lock)(m);
    TRY_THEN_PARK(int, R(pthread_mutex_trylock)(m), p_ != EBUSY, R(pthread_mutex_lock)(m));
}

HS_EXPORT int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *t)
{
    if (!hs_enter())
        return R(pthread_mutex_timedlock)(m, t);
    TRY_THEN_PARK(int, R(pthread_mutex_trylock)(m), p_ != EBUSY, R(pthread_mutex_timedlock)(m, t));
}

HS_EXPORT int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t c, const struct timespec *t)
{
    if (!hs_enter())
        return R(pthread_mutex_clocklock)(m, c, t);
    TRY_THEN_PARK(int, R(pthread_mutex_trylock)(m), p_ != EBUSY, R(pthread_mutex_clocklock)(m, c, t));
}

#define RWLOCK(kind)                                                                          \
    REAL(int, pthread_rwlock_try##kind##lock, (pthread_rwlock_t *));                         \
    REAL(int, pthread_rwlock_##kind##lock, (pthread_rwlock_t *));                            \
    REAL(int, pthread_rwlock_timed##kind##lock, (pthread_rwlock_t *, const struct timespec *)); \
    REAL(int, pthread_rwlock_clock##kind##lock, (pthread_rwlock_t *, clockid_t, const struct timespec *)); \
    HS_EXPORT int pthread_rwlock_##kind##lock(pthread_rwlock_t *l)                           \
    {                                                                                         \
        if (!hs_enter())                                                                      \
            return R(pthread_rwlock_##kind##lock)(l);                                         \
        TRY_THEN_PARK(int, R(pthread_rwlock_try##kind##lock)(l), p_ != EBUSY,                 \
                      R(pthread_rwlock_##kind##lock)(l));                                     \
    }                                                                                         \
    HS_EXPORT int pthread_rwlock_timed##kind##lock(pthread_rwlock_t *l, const struct timespec *t) \
    {                                                                                         \
        if (!hs_enter())                                                                      \
            return R(pthread_rwlock_timed##kind##lock)(l, t);                                 \
        TRY_THEN_PARK(int, R(pthread_rwlock_try##kind##lock)(l), p_ != EBUSY,                 \
                      R(pthread_rwlock_timed##kind##lock)(l, t));                             \
    }                                                                                         \
    HS_EXPORT int pthread_rwlock_clock##kind##lock(pthread_rwlock_t *l, clockid_t c,          \
                                                   const struct timespec *t)                  \
    {                                                                                         \
        if (!hs_enter())                                                                      \
            return R(pthread_rwlock_clock##kind##lock)(l, c, t);                              \
        TRY_THEN_PARK(int, R(pthread_rwlock_try##kind##lock)(l), p_ != EBUSY,                 \
                      R(pthread_rwlock_clock##kind##lock)(l, c, t));                          \
    }
RWLOCK(rd)
RWLOCK(wr)

REAL(int, pthread_cond_wait, (pthread_cond_t *, pthread_mutex_t *));
REAL(int, pthread_cond_timedwait, (pthread_cond_t *, pthread_mutex_t *, const struct timespec *));
REAL(int, pthread_cond_clockwait, (pthread_cond_t *, pthread_mutex_t *, clockid_t, const struct timespec *));
REAL(int, pthread_barrier_wait, (pthread_barrier_t *));

HS_EXPORT int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    if (!hs_enter())
        return R(pthread_cond_wait)(c, m);
    PARKED(int, R(pthread_cond_wait)(c, m));
}

HS_EXPORT int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t)
{
    if (!hs_enter())
        return R(pthread_cond_timedwait)(c, m, t);
    PARKED(int, R(pthread_cond_timedwait)(c, m, t));
}

HS_EXPORT int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t k,
                                     const struct timespec *t)
{
    if (!hs_enter())
        return R(pthread_cond_clockwait)(c, m, k, t);
    PARKED(int, R(pthread_cond_clockwait)(c, m, k, t));
}

HS_EXPORT int pthread_barrier_wait(pthread_barrier_t *b)
{
    if (!hs_enter())
        return R(pthread_barrier_wait)(b);
    PARKED(int, R(pthread_barrier_wait)(b));
}

REAL(int, sem_trywait, (sem_t *));
REAL(int, sem_wait, (sem_t *));
REAL(int, sem_timedwait, (sem_t *, const struct timespec *));
REAL(int, sem_clockwait, (sem_t *, clockid_t, const struct timespec *));

HS_EXPORT int sem_wait(sem_t *s)
{
    if (!hs_enter())
        return R(sem_wait)(s);
    TRY_THEN_PARK(int, R(sem_trywait)(s), p_ == 0 || errno != EAGAIN, R(sem_wait)(s));
}

HS_EXPORT int sem_timedwait(sem_t *s, const struct timespec *t)
{
    if (!hs_enter())
        return R(sem_timedwait)(s, t);
    TRY_THEN_PARK(int, R(sem_trywait)(s), p_ == 0 || errno != EAGAIN, R(sem_timedwait)(s, t));
}

HS_EXPORT int sem_clockwait(sem_t *s, clockid_t c, const struct timespec *t)
{
    if (!hs_enter())
        return R(sem_clockwait)(s, c, t);
    TRY_THEN_PARK(int, R(sem_trywait)(s), p_ == 0 || errno != EAGAIN, R(sem_clockwait)(s, c, t));
}

REAL(int, pthread_tryjoin_np, (pthread_t, void **));
REAL(int, pthread_join, (pthread_t, void **));
REAL(int, pthread_timedjoin_np, (pthread_t, void **, const struct timespec *));
REAL(int, pthread_clockjoin_np, (pthread_t, void **, clockid_t, const struct timespec *));

HS_EXPORT int pthread_join(pthread_t t, void **ret)
{
    if (!hs_enter())
        return R(pthread_join)(t, ret);
    TRY_THEN_PARK(int, R(pthread_tryjoin_np)(t, ret), p_ != EBUSY, R(pthread_join)(t, ret));
}

HS_EXPORT int pthread_timedjoin_np(pthread_t t, void **ret, const struct timespec *ts)
{
    if (!hs_enter())
        return R(pthread_timedjoin_np)(t, ret, ts);
    TRY_THEN_PARK(int, R(pthread_tryjoin_np)(t, ret), p_ != EBUSY, R(pthread_timedjoin_np)(t, ret, ts));
}

HS_EXPORT int pthread_clockjoin_np(pthread_t t, void **ret, clockid_t c, const struct timespec *ts)
{
    if (!hs_enter())
        return R(pthread_clockjoin_np)(t, ret, c, ts);
    TRY_THEN_PARK(int, R(pthread_tryjoin_np)(t, ret), p_ != EBUSY,
                  R(pthread_clockjoin_np)(t, ret, c, ts));
}

/* --- futexes through syscall() (libomp, TBB, ...) and through the trap (libgomp) -------- */

long hs_futex(long a1, long a2, long a3, long a4, long a5, long a6)
{
    int op = (int)a2 & FUTEX_CMD_MASK;
    int waits = op == FUTEX_WAIT || op == FUTEX_WAIT_BITSET || op == FUTEX_LOCK_PI
                || op == FUTEX_LOCK_PI2 || op == FUTEX_WAIT_REQUEUE_PI;
    if (!waits || !hs_enter())
        return hs_raw(SYS_futex, a1, a2, a3, a4, a5, a6);
    if ((op == FUTEX_WAIT || op == FUTEX_WAIT_BITSET) && a1 && !(a1 & 3)
        && __atomic_load_n((int32_t *)a1, __ATOMIC_RELAXED) != (int32_t)a3) {
        hs_exit();  /* the word changed already: the kernel would say EAGAIN at once */
        return -EAGAIN;
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

/* --- sleeps, signal waits, polls -------------------------------------------------------- */

REAL(int, nanosleep, (const struct timespec *, struct timespec *));
REAL(int, clock_nanosleep, (clockid_t, int, const struct timespec *, struct timespec *));
REAL(int, usleep, (useconds_t));
REAL(unsigned, sleep, (unsigned));

static int zero_ts(const struct timespec *t)
{
    return t && t->tv_sec == 0 && t->tv_nsec == 0;
}

HS_EXPORT int nanosleep(const struct timespec *t, struct timespec *rem)
{
    if (zero_ts(t) || !hs_enter())
        return R(nanosleep)(t, rem);
    PARKED(int, R(nanosleep)(t, rem));
}

HS_EXPORT int clock_nanosleep(clockid_t c, int flags, const struct timespec *t, struct timespec *rem)
{
    if ((!(flags & TIMER_ABSTIME) && zero_ts(t)) || !hs_enter())
        return R(clock_nanosleep)(c, flags, t, rem);
    PARKED(int, R(clock_nanosleep)(c, flags, t, rem));
}

HS_EXPORT int usleep(useconds_t us)
{
    if (us == 0 || !hs_enter())
        return R(usleep)(us);
    PARKED(int, R(usleep)(us));
}

HS_EXPORT unsigned sleep(unsigned s)
{
    if (s == 0 || !hs_enter())
        return R(sleep)(s);
    PARKED(unsigned, R(sleep)(s));
}

REAL(int, pause, (void));
REAL(int, sigsuspend, (const sigset_t *));
REAL(int, sigwaitinfo, (const sigset_t *, siginfo_t *));
REAL(int, sigtimedwait, (const sigset_t *, siginfo_t *, const struct timespec *));
REAL(int, sigwait, (const sigset_t *, int *));

HS_EXPORT int pause(void)
{
    if (!hs_enter())
        return R(pause)();
    PARKED(int, R(pause)());
}

HS_EXPORT int sigsuspend(const sigset_t *m)
{
    if (!hs_enter())
        return R(sigsuspend)(m);
    PARKED(int, R(sigsuspend)(m));
}

HS_EXPORT int sigwaitinfo(const sigset_t *s, siginfo_t *i)
{
    if (!hs_enter())
        return R(sigwaitinfo)(s, i);
    PARKED(int, R(sigwaitinfo)(s, i));
}

HS_EXPORT int sigtimedwait(const sigset_t *s, siginfo_t *i, const struct timespec *t)
{
    if (zero_ts(t) || !hs_enter())
        return R(sigtimedwait)(s, i, t);
    PARKED(int, R(sigtimedwait)(s, i, t));
}

HS_EXPORT int sigwait(const sigset_t *s, int *sig)
{
    if (!hs_enter())
        return R(sigwait)(s, sig);
    PARKED(int, R(sigwait)(s, sig));
}

REAL(int, ppoll, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *));
REAL(int, __poll_chk, (struct pollfd *, nfds_t, int, size_t));
REAL(int, select, (int, fd_set *, fd_set *, fd_set *, struct timeval *));
REAL(int, pselect, (int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *));
REAL(int, epoll_wait, (int, struct epoll_event *, int, int));
REAL(int, epoll_pwait, (int, struct epoll_event *, int, int, const sigset_t *));

static const struct timespec ts0 = {0, 0};

HS_EXPORT int poll(struct pollfd *f, nfds_t n, int ms)
{
    if (ms == 0 || !hs_enter())
        return R(poll)(f, n, ms);
    TRY_THEN_PARK(int, R(poll)(f, n, 0), p_ != 0, R(poll)(f, n, ms));
}

HS_EXPORT int __poll_chk(struct pollfd *f, nfds_t n, int ms, size_t len)
{
    if (ms == 0 || !hs_enter())
        return R(__poll_chk)(f, n, ms, len);
    TRY_THEN_PARK(int, R(__poll_chk)(f, n, 0, len), p_ != 0, R(__poll_chk)(f, n, ms, len));
}

HS_EXPORT int ppoll(struct pollfd *f, nfds_t n, const struct timespec *t, const sigset_t *m)
{
    if (zero_ts(t) || !hs_enter())
        return R(ppoll)(f, n, t, m);
    TRY_THEN_PARK(int, R(ppoll)(f, n, &ts0, m), p_ != 0, R(ppoll)(f, n, t, m));
}

/* a zero-timeout select first; when nothing is ready the sets it cleared are put back */
#define SELECT_FIRST(probe, call)                                                             \
    do {                                                                                      \
        fd_set r0, w0, e0;                                                                    \
        if (rd) r0 = *rd;                                                                     \
        if (wr) w0 = *wr;                                                                     \
        if (ex) e0 = *ex;                                                                     \
        int p_ = (probe);                                                                     \
        if (p_ != 0) {                                                                        \
            hs_exit();                                                                        \
            return p_;                                                                        \
        }                                                                                     \
        if (rd) *rd = r0;                                                                     \
        if (wr) *wr = w0;                                                                     \
        if (ex) *ex = e0;                                                                     \
        PARKED(int, call);                                                                    \
    } while (0)

HS_EXPORT int select(int n, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
    if ((tv && tv->tv_sec == 0 && tv->tv_usec == 0) || !hs_enter())
        return R(select)(n, rd, wr, ex, tv);
    struct timeval z = {0, 0};
    SELECT_FIRST(R(select)(n, rd, wr, ex, &z), R(select)(n, rd, wr, ex, tv));
}

HS_EXPORT int pselect(int n, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *t,
                      const sigset_t *m)
{
    if (zero_ts(t) || !hs_enter())
        return R(pselect)(n, rd, wr, ex, t, m);
    SELECT_FIRST(R(pselect)(n, rd, wr, ex, &ts0, m), R(pselect)(n, rd, wr, ex, t, m));
}

HS_EXPORT int epoll_wait(int ep, struct epoll_event *ev, int max, int ms)
{
    if (ms == 0 || !hs_enter())
        return R(epoll_wait)(ep, ev, max, ms);
    TRY_THEN_PARK(int, R(epoll_wait)(ep, ev, max, 0), p_ != 0, R(epoll_wait)(ep, ev, max, ms));
}

HS_EXPORT int epoll_pwait(int ep, struct epoll_event *ev, int max, int ms, const sigset_t *m)
{
    if (ms == 0 || !hs_enter())
        return R(epoll_pwait)(ep, ev, max, ms, m);
    TRY_THEN_PARK(int, R(epoll_pwait)(ep, ev, max, 0, m), p_ != 0, R(epoll_pwait)(ep, ev, max, ms, m));
}

/* --- descriptors, children, file locks -------------------------------------------------- */

REAL(ssize_t, __read_chk, (int, void *, size_t, size_t));
REAL(ssize_t, readv, (int, const struct iovec *, int));
REAL(ssize_t, recv, (int, void *, size_t, int));
REAL(ssize_t, __recv_chk, (int, void *, size_t, size_t, int));
REAL(ssize_t, recvfrom, (int, void *, size_t, int, struct sockaddr *, socklen_t *));
REAL(ssize_t, __recvfrom_chk, (int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *));
REAL(ssize_t, recvmsg, (int, struct msghdr *, int));
REAL(int, accept, (int, struct sockaddr *, socklen_t *));
REAL(int, accept4, (int, struct sockaddr *, socklen_t *, int));
REAL(ssize_t, write, (int, const void *, size_t));
REAL(ssize_t, writev, (int, const struct iovec *, int));
REAL(ssize_t, send, (int, const void *, size_t, int));
REAL(ssize_t, sendto, (int, const void *, size_t, int, const struct sockaddr *, socklen_t));
REAL(ssize_t, sendmsg, (int, const struct msghdr *, int));

HS_EXPORT ssize_t read(int fd, void *b, size_t n) { BLOCKING_IO(ssize_t, read, fd, POLLIN, 0, (fd, b, n)); }
HS_EXPORT ssize_t __read_chk(int fd, void *b, size_t n, size_t len)
{
    BLOCKING_IO(ssize_t, __read_chk, fd, POLLIN, 0, (fd, b, n, len));
}
HS_EXPORT ssize_t readv(int fd, const struct iovec *v, int n) { BLOCKING_IO(ssize_t, readv, fd, POLLIN, 0, (fd, v, n)); }
HS_EXPORT ssize_t recv(int fd, void *b, size_t n, int fl)
{
    BLOCKING_IO(ssize_t, recv, fd, POLLIN, fl & MSG_DONTWAIT, (fd, b, n, fl));
}
HS_EXPORT ssize_t __recv_chk(int fd, void *b, size_t n, size_t len, int fl)
{
    BLOCKING_IO(ssize_t, __recv_chk, fd, POLLIN, fl & MSG_DONTWAIT, (fd, b, n, len, fl));
}
HS_EXPORT ssize_t recvfrom(int fd, void *b, size_t n, int fl, struct sockaddr *a, socklen_t *al)
{
    BLOCKING_IO(ssize_t, recvfrom, fd, POLLIN, fl & MSG_DONTWAIT, (fd, b, n, fl, a, al));
}
HS_EXPORT ssize_t __recvfrom_chk(int fd, void *b, size_t n, size_t len, int fl, struct sockaddr *a,
                                 socklen_t *al)
{
    BLOCKING_IO(ssize_t, __recvfrom_chk, fd, POLLIN, fl & MSG_DONTWAIT, (fd, b, n, len, fl, a, al));
}
HS_EXPORT ssize_t recvmsg(int fd, struct msghdr *m, int fl)
{
    BLOCKING_IO(ssize_t, recvmsg, fd, POLLIN, fl & MSG_DONTWAIT, (fd, m, fl));
}
HS_EXPORT int accept(int fd, struct sockaddr *a, socklen_t *al) { BLOCKING_IO(int, accept, fd, POLLIN, 0, (fd, a, al)); }
HS_EXPORT int accept4(int fd, struct sockaddr *a, socklen_t *al, int fl)
{
    BLOCKING_IO(int, accept4, fd, POLLIN, fl & SOCK_NONBLOCK, (fd, a, al, fl));
}
HS_EXPORT ssize_t write(int fd, const void *b, size_t n) { BLOCKING_IO(ssize_t, write, fd, POLLOUT, 0, (fd, b, n)); }
HS_EXPORT ssize_t writev(int fd, const struct iovec *v, int n) { BLOCKING_IO(ssize_t, writev, fd, POLLOUT, 0, (fd, v, n)); }
HS_EXPORT ssize_t send(int fd, const void *b, size_t n, int fl)
{
    BLOCKING_IO(ssize_t, send, fd, POLLOUT, fl & MSG_DONTWAIT, (fd, b, n, fl));
}
HS_EXPORT ssize_t sendto(int fd, const void *b, size_t n, int fl, const struct sockaddr *a, socklen_t al)
{
    BLOCKING_IO(ssize_t, sendto, fd, POLLOUT, fl & MSG_DONTWAIT, (fd, b, n, fl, a, al));
}
HS_EXPORT ssize_t sendmsg(int fd, const struct msghdr *m, int fl)
{
    BLOCKING_IO(ssize_t, sendmsg, fd, POLLOUT, fl & MSG_DONTWAIT, (fd, m, fl));
}

REAL(pid_t, wait, (int *));
REAL(pid_t, waitpid, (pid_t, int *, int));
REAL(pid_t, wait3, (int *, int, struct rusage *));
REAL(pid_t, wait4, (pid_t, int *, int, struct rusage *));
REAL(int, waitid, (idtype_t, id_t, siginfo_t *, int));
REAL(int, flock, (int, int));

HS_EXPORT pid_t wait(int *st)
{
    if (!hs_enter())
        return R(wait)(st);
    TRY_THEN_PARK(pid_t, R(waitpid)(-1, st, WNOHANG), p_ != 0, R(wait)(st));
}

HS_EXPORT pid_t waitpid(pid_t pid, int *st, int opt)
{
    if ((opt & WNOHANG) || !hs_enter())
        return R(waitpid)(pid, st, opt);
    TRY_THEN_PARK(pid_t, R(waitpid)(pid, st, opt | WNOHANG), p_ != 0, R(waitpid)(pid, st, opt));
}

HS_EXPORT pid_t wait3(int *st, int opt, struct rusage *ru)
{
    if ((opt & WNOHANG) || !hs_enter())
        return R(wait3)(st, opt, ru);
    TRY_THEN_PARK(pid_t, R(wait3)(st, opt | WNOHANG, ru), p_ != 0, R(wait3)(st, opt, ru));
}

HS_EXPORT pid_t wait4(pid_t pid, int *st, int opt, struct rusage *ru)
{
    if ((opt & WNOHANG) || !hs_enter())
        return R(wait4)(pid, st, opt, ru);
    TRY_THEN_PARK(pid_t, R(wait4)(pid, st, opt | WNOHANG, ru), p_ != 0, R(wait4)(pid, st, opt, ru));
}

HS_EXPORT int waitid(idtype_t t, id_t id, siginfo_t *info, int opt)
{
    if ((opt & WNOHANG) || !info || !hs_enter())
        return R(waitid)(t, id, info, opt);
    info->si_pid = 0;
    TRY_THEN_PARK(int, R(waitid)(t, id, info, opt | WNOHANG), p_ != 0 || info->si_pid != 0,
                  R(waitid)(t, id, info, opt));
}

HS_EXPORT int flock(int fd, int op)
{
    if ((op & LOCK_NB) || !hs_enter())
        return R(flock)(fd, op);
    TRY_THEN_PARK(int, R(flock)(fd, op | LOCK_NB), p_ == 0 || errno != EWOULDBLOCK, R(flock)(fd, op));
}

/* --- scheduling points, affinity, threads, exits, signals ------------------------------- */

REAL(int, sched_yield, (void));
REAL(int, pthread_getaffinity_np, (pthread_t, size_t, cpu_set_t *));
REAL(int, pthread_setaffinity_np, (pthread_t, size_t, const cpu_set_t *));

HS_EXPORT int sched_yield(void)
{
    if (hs_enter()) {
        hs_yield_point();
        hs_exit();
    }
    return R(sched_yield)();
}

static int is_self(pid_t pid)
{
    return pid == 0 || pid == getpid() || (hs_t.tid && pid == hs_t.tid);
}

/* the mask the program would have had: runtimes size their pools from it */
static void answer(size_t size, cpu_set_t *m, int own)
{
    cpu_set_t src;
    hs_natural_mask(&src, own);
    memset(m, 0, size);
    memcpy(m, &src, size < sizeof src ? size : sizeof src);
}

static void record(size_t size, const cpu_set_t *m)
{
    CPU_ZERO(&hs_t.mask);
    memcpy(&hs_t.mask, m, size < sizeof hs_t.mask ? size : sizeof hs_t.mask);
    hs_t.has_mask = 1;
}

HS_EXPORT int sched_getaffinity(pid_t pid, size_t size, cpu_set_t *m)
{
    int r = R(sched_getaffinity)(pid, size, m);
    if (r == 0 && hs_on && is_self(pid))
        answer(size, m, 1);
    return r;
}

HS_EXPORT int pthread_getaffinity_np(pthread_t t, size_t size, cpu_set_t *m)
{
    int r = R(pthread_getaffinity_np)(t, size, m);
    if (r == 0 && hs_on)
        answer(size, m, pthread_equal(t, pthread_self()));
    return r;
}

/* a managed thread's own mask: recorded and answered back, not applied (the arbiter
   places its threads) */
HS_EXPORT int sched_setaffinity(pid_t pid, size_t size, const cpu_set_t *m)
{
    if (!hs_on || hs_t.slot < 0 || !is_self(pid))
        return R(sched_setaffinity)(pid, size, m);
    record(size, m);
    return 0;
}

HS_EXPORT int pthread_setaffinity_np(pthread_t t, size_t size, const cpu_set_t *m)
{
    if (!hs_on || hs_t.slot < 0)
        return R(pthread_setaffinity_np)(t, size, m);
    if (pthread_equal(t, pthread_self()))
        record(size, m);
    return 0;
}

REAL(int, pthread_create, (pthread_t *, const pthread_attr_t *, void *(*)(void *), void *));

struct hs_start {
    void *(*fn)(void *);
    void *arg;
};

static void *trampoline(void *p)
{
    struct hs_start s = *(struct hs_start *)p;
    free(p);
    hs_thread_begin();  /* registers, arms the trap, waits for a token */
    return s.fn(s.arg);  /* its exit leaves the job (hs_thread_end, a TLS destructor) */
}

HS_EXPORT int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
    if (!hs_on)
        return R(pthread_create)(t, a, fn, arg);
    struct hs_start *s = malloc(sizeof *s);
    if (!s)
        return EAGAIN;
    s->fn = fn;
    s->arg = arg;
    int r = R(pthread_create)(t, a, trampoline, s);
    if (r)
        free(s);
    return r;
}

REAL(void, _exit, (int));
REAL(void, _Exit, (int));

HS_EXPORT void _exit(int status)
{
    hs_thread_end(NULL);
    R(_exit)(status);
    __builtin_unreachable();
}

HS_EXPORT void _Exit(int status)
{
    hs_thread_end(NULL);
    R(_Exit)(status);
    __builtin_unreachable();
}

REAL(__sighandler_t, signal, (int, __sighandler_t));
REAL(int, sigprocmask, (int, const sigset_t *, sigset_t *));
REAL(int, pthread_sigmask, (int, const sigset_t *, sigset_t *));

HS_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (!hs_on || !hs_own_signal(sig))
        return R(sigaction)(sig, act, old);
    return hs_app_sigaction(sig, act, old);
}

HS_EXPORT __sighandler_t signal(int sig, __sighandler_t h)
{
    if (!hs_on || !hs_own_signal(sig))
        return R(signal)(sig, h);
    struct sigaction a, o;
    memset(&a, 0, sizeof a);
    a.sa_handler = h;
    a.sa_flags = SA_RESTART;
    hs_app_sigaction(sig, &a, &o);
    return o.sa_handler;
}

/* the shim's signals are never blocked (hs_keep_unblocked) */
HS_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
    if (!hs_on || !set || how == SIG_UNBLOCK)
        return R(sigprocmask)(how, set, old);
    sigset_t s = *set;
    hs_keep_unblocked(&s);
    return R(sigprocmask)(how, &s, old);
}

HS_EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    if (!hs_on || !set || how == SIG_UNBLOCK)
        return R(pthread_sigmask)(how, set, old);
    sigset_t s = *set;
    hs_keep_unblocked(&s);
    return R(pthread_sigmask)(how, &s, old);
}
