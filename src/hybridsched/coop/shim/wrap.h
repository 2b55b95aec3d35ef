/* What the wrap_*.c files share: the real function behind each interposed one (found
   lazily, by dlsym of the next definition), and the two shapes of a wrapped call. */
#ifndef HS_WRAP_H
#define HS_WRAP_H
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

/* A lock word of the common futex protocol: 0 free, 1 held, `sleepers` held with threads
   asleep on it (on `op`, FUTEX_WAIT or FUTEX_WAIT_PRIVATE), one of which the unlock wakes:
   libgomp's locks (-1), glibc's plain mutexes (2). */
struct hs_lockword {
    int *word;
    int sleepers;
    int op;
};

/* Inside the shim, after `attempt` (which never blocks; nonzero once it has the lock) found
   the lock held: spins on it for a few µs (hs_spin), then waits for it parked, without
   taking it, and takes it (by `attempt`) only holding a token again. 0 where the word held
   a value of no known state: the caller then waits as libc does, parked. (wrap_locks.c) */
HS_HIDDEN int hs_take_with_token(struct hs_lockword w, int (*attempt)(void *), void *arg);
/* A spin, holding the token, while nobody waits for a token and another thread of this
   job runs holding one (the one likely to change what is waited for), for up to `ns`:
   1 as soon as `done(arg)`, 0 when it gave up (or never began). (wrap_locks.c) */
HS_HIDDEN int hs_spin(int (*done)(void *), void *arg, int64_t ns);
/* The same spin whoever waits for a token, as libc spins for a spinlock (wrap_locks.c). */
HS_HIDDEN int hs_spin_regardless(int (*done)(void *), void *arg, int64_t ns);
/* how long a spin for a lock lasts before the waiter looks again: its trade-off is
   explained in wrap_locks.c, before hs_take_with_token */
#define LOCK_SPIN_NS 10000
/* whether descriptor `fd` is ready for `events` now, and whether it is in non-blocking
   mode; both keep errno (wrap_io.c) */
HS_HIDDEN int hs_ready(int fd, short events);
HS_HIDDEN int hs_nonblocking(int fd);
/* whether a call waiting for `events` on descriptor `fd` would sleep now: not ready, and
   in blocking mode (wrap_io.c) */
HS_HIDDEN int hs_would_block(int fd, short events);
/* whether a write of `n` bytes to `fd` may sleep: a pipe without room for them, a socket
   (wrap_stdio.c) */
HS_HIDDEN int hs_write_may_sleep(int fd, size_t n);

static inline void *sym(const char *name)
{
    void *p = NULL;
    if (strncmp(name, "pthread_cond_", 13) == 0)  /* the condition variables of glibc >= 2.3.2 */
        p = dlvsym(RTLD_NEXT, name, "GLIBC_2.3.2");
    return p ? p : dlsym(RTLD_NEXT, name);
}

#define REAL(ret, name, params) static ret(*real_##name) params
/* the real function, found by `lookup` on first use */
#define RESOLVED(name, lookup)                                                                \
    ({                                                                                        \
        if (__builtin_expect(!real_##name, 0))                                                \
            real_##name = (__typeof__(real_##name))lookup(#name);                             \
        real_##name;                                                                          \
    })
#define R(name) RESOLVED(name, sym)

/* give the token up around `call`, keeping the call's errno; `then` runs once it returned
   (its result in r_), before the token is asked for again */
#define PARKED_THEN(type, call, then)                                                         \
    do {                                                                                      \
        type r_;                                                                              \
        int e_;                                                                               \
        hs_park();                                                                            \
        r_ = (call);                                                                          \
        e_ = errno;                                                                           \
        then;                                                                                 \
        hs_resume();                                                                          \
        hs_exit();                                                                            \
        errno = e_;                                                                           \
        return r_;                                                                            \
    } while (0)
#define PARKED(type, call) PARKED_THEN(type, call, (void)0)

/* try `probe` (the call that never blocks) first: done if `done`, else park around `call`;
   `after(result)` runs on either path once the call returned, before the token is asked
   for again (the wait family's reclaims, wrap_io.c) */
#define TRY_THEN_PARK_AFTER(type, probe, done, call, after)                                   \
    do {                                                                                      \
        type p_ = (probe);                                                                    \
        if (done) {                                                                           \
            after(p_);                                                                        \
            hs_exit();                                                                        \
            return p_;                                                                        \
        }                                                                                     \
        PARKED_THEN(type, call, after(r_));                                                   \
    } while (0)
#define TRY_THEN_PARK(type, probe, done, call) TRY_THEN_PARK_AFTER(type, probe, done, call, (void))

/* a wrapper's whole body: `call` straight through where hs_enter refuses (the thread is not
   managed, or is inside the shim already), else with the token given up around it (PARKED) */
#define ENTER_PARKED(type, call)                                                              \
    do {                                                                                      \
        if (!hs_enter())                                                                      \
            return call;                                                                      \
        PARKED(type, call);                                                                   \
    } while (0)

/* Whether the call to come is made with the token kept lazily (hs_park_lazy: two atomic
   operations), whatever it may do: where nobody waits for a token, instead of a look at
   whether it may sleep (a poll or an ioctl, each a system call). 200 000 line-buffered
   lines to `cat` with nobody waiting took 0.186 s so, 0.136 s now, 0.124 s plain; 300 000
   unbuffered putc to /dev/null 0.188, 0.092 and 0.072 s (the review's case; coop exec's
   own start-up apart); `yes | head -c | sha256sum`, two at once: 0.583 s against 0.602,
   env's 0.367. A thread that comes to wait meanwhile takes the token, as from any lazy
   park; hs_resume after the call. */
static inline int hs_idle_park(void)
{
    return hs_ld(&hs_v.h->waiting) <= 0 && hs_park_lazy();
}

/* the same where `sleeps` (looked at inside the shim, where others wait) says the call may
   sleep; else `call` straight through, keeping the token */
#define ENTER_PARKED_IF(type, sleeps, call)                                                   \
    do {                                                                                      \
        if (!hs_enter())                                                                      \
            return call;                                                                      \
        if (!hs_idle_park()) {                                                                \
            if (!(sleeps)) {                                                                  \
                hs_exit();                                                                    \
                return call;                                                                  \
            }                                                                                 \
            hs_park();                                                                        \
        }                                                                                     \
        type r_ = (call);                                                                     \
        int e_ = errno;                                                                       \
        hs_resume();                                                                          \
        hs_exit();                                                                            \
        errno = e_;                                                                           \
        return r_;                                                                            \
    } while (0)

/* the same with the `probe` that never blocks tried first (TRY_THEN_PARK) */
#define ENTER_TRY_THEN_PARK(type, probe, done, call)                                          \
    do {                                                                                      \
        if (!hs_enter())                                                                      \
            return call;                                                                      \
        TRY_THEN_PARK(type, probe, done, call);                                               \
    } while (0)

#endif
