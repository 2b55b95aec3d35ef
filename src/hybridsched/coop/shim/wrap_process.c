/* The interposed libc functions, part 3: the scheduling point (sched_yield), the
   affinity the program sees, its threads' registration, its exits, and the shim's own
   signals kept the shim's. */
#include "wrap.h"

REAL(int, sched_setaffinity, (pid_t, size_t, const cpu_set_t *));
REAL(int, sched_getaffinity, (pid_t, size_t, cpu_set_t *));
REAL(int, sigaction, (int, const struct sigaction *, struct sigaction *));

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

/* whether the kernel would take `m`: some CPU of it exists here (EINVAL otherwise, which
   the program is told as it would be without the shim; a mask of CPU 99 on a 2-CPU
   machine was answered back as the empty set, the review) */
static int takeable(size_t size, const cpu_set_t *m)
{
    long conf = sysconf(_SC_NPROCESSORS_CONF);
    for (long i = 0; i < conf && (size_t)i < size * 8; i++)
        if (CPU_ISSET_S(i, size, m))
            return 1;
    return 0;
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
    if (!takeable(size, m)) {
        errno = EINVAL;
        return -1;
    }
    record(size, m);
    return 0;
}

HS_EXPORT int pthread_setaffinity_np(pthread_t t, size_t size, const cpu_set_t *m)
{
    if (!hs_on || hs_t.slot < 0)
        return R(pthread_setaffinity_np)(t, size, m);
    if (!takeable(size, m))
        return EINVAL;
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
    if (act)  /* sa_handler and sa_sigaction share their storage */
        hs_note_handler(sig, (const void *)act->sa_handler, (unsigned long)act->sa_flags);
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

/* the shim's signals are never blocked (hs_keep_unblocked), by either call that sets a mask */
static int keep_ours(int (*real)(int, const sigset_t *, sigset_t *), int how,
                     const sigset_t *set, sigset_t *old)
{
    if (!hs_on || !set || how == SIG_UNBLOCK)
        return real(how, set, old);
    sigset_t s = *set;
    hs_keep_unblocked(&s);
    return real(how, &s, old);
}

HS_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
    return keep_ours(R(sigprocmask), how, set, old);
}

HS_EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    return keep_ours(R(pthread_sigmask), how, set, old);
}
