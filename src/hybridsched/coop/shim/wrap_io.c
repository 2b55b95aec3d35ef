/* The interposed libc functions, part 2: sleeps, signal waits, polls, reads and writes,
   children and file locks (see wrap_sync.c). A descriptor is polled first, so a ready one,
   or a regular file, costs no token. */
#include "wrap.h"

REAL(int, poll, (struct pollfd *, nfds_t, int));
REAL(ssize_t, read, (int, void *, size_t));

int hs_ready(int fd, short events)
{
    struct pollfd p = {fd, events, 0};
    int e = errno, ready = R(poll)(&p, 1, 0) > 0;
    errno = e;
    return ready;
}

int hs_nonblocking(int fd)
{
    int e = errno, fl = fcntl(fd, F_GETFL);
    errno = e;
    return fl >= 0 && (fl & O_NONBLOCK);
}

/* a descriptor that is not ready, in blocking mode: the call would sleep */
int hs_would_block(int fd, short events)
{
    return !hs_ready(fd, events) && !hs_nonblocking(fd);
}

/* `name` parked where it would sleep: its descriptor not ready (a read, an accept), or
   (BLOCKING_WRITE) unable to take all `n` bytes (hs_write_may_sleep: a pipe or socket may
   be writable and still not take them all without sleeping) */
#define BLOCKING_IO(type, name, fd, events, skip, args)                                      \
    ENTER_PARKED_IF(type, !(skip) && hs_would_block(fd, events), R(name) args)
#define BLOCKING_WRITE(type, name, fd, n, skip, args)                                         \
    ENTER_PARKED_IF(type, !(skip) && hs_write_may_sleep(fd, n), R(name) args)

static size_t iov_bytes(const struct iovec *v, int n)
{
    size_t all = 0;
    for (int i = 0; i < n && v; i++)
        all = __builtin_add_overflow(all, v[i].iov_len, &all) ? (size_t)-1 : all;
    return all;
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
HS_EXPORT ssize_t write(int fd, const void *b, size_t n) { BLOCKING_WRITE(ssize_t, write, fd, n, 0, (fd, b, n)); }
HS_EXPORT ssize_t writev(int fd, const struct iovec *v, int n)
{
    BLOCKING_WRITE(ssize_t, writev, fd, iov_bytes(v, n), 0, (fd, v, n));
}
HS_EXPORT ssize_t send(int fd, const void *b, size_t n, int fl)
{
    BLOCKING_WRITE(ssize_t, send, fd, n, fl & MSG_DONTWAIT, (fd, b, n, fl));
}
HS_EXPORT ssize_t sendto(int fd, const void *b, size_t n, int fl, const struct sockaddr *a, socklen_t al)
{
    BLOCKING_WRITE(ssize_t, sendto, fd, n, fl & MSG_DONTWAIT, (fd, b, n, fl, a, al));
}
HS_EXPORT ssize_t sendmsg(int fd, const struct msghdr *m, int fl)
{
    BLOCKING_WRITE(ssize_t, sendmsg, fd, m ? iov_bytes(m->msg_iov, (int)m->msg_iovlen) : 0,
                   fl & MSG_DONTWAIT, (fd, m, fl));
}

REAL(pid_t, wait, (int *));
REAL(pid_t, waitpid, (pid_t, int *, int));
REAL(pid_t, wait3, (int *, int, struct rusage *));
REAL(pid_t, wait4, (pid_t, int *, int, struct rusage *));
REAL(int, waitid, (idtype_t, id_t, siginfo_t *, int));
REAL(int, flock, (int, int));

/* The wait family: what it reports of a child may free tokens the reclaim scan would
   take back only at its period (RECLAIM_POLL_NS). A child reaped (exited, killed) is gone
   with its threads, whose slots and tokens are freed at once, from the pid alone: 20
   rounds of two busy children killed and reaped took 2.0-2.2 s, 0.3 s plain (the hostile
   review, beside a busy loop; `timeout`, Pool.terminate), now as long as plain. A child
   stopped, by a tracer (strace, gdb) or by job control, may be a thread holding a token
   it cannot use until continued: the scan comes
   now where every token is held, before this thread asks for one; without it a tracer in
   the traced command's job waited for the scan at each stop whose tracee held a token
   (strace -f of a two-round OpenMP loop took 4.4 s instead of 0.15 s). */
static void after_wait(pid_t pid, int reaped, int stopped)
{
    if (pid > 0 && reaped)
        hs_reclaim_gone(pid);
    else if (pid > 0 && stopped)
        hs_reclaim_now();
}
/* after_wait for the wait family's result `pid`, its status in `st` */
#define AFTER_ST(pid)                                                                         \
    after_wait((pid), st && (WIFEXITED(*st) || WIFSIGNALED(*st)), st && WIFSTOPPED(*st))
/* the same for waitid's result `r`, what it reports in `info` */
#define AFTER_INFO(r)                                                                         \
    after_wait((r) == 0 ? info->si_pid : 0,                                                   \
               info->si_code == CLD_EXITED || info->si_code == CLD_KILLED                     \
                   || info->si_code == CLD_DUMPED,                                            \
               info->si_code == CLD_STOPPED || info->si_code == CLD_TRAPPED)

HS_EXPORT pid_t wait(int *st)
{
    if (!hs_enter())
        return R(wait)(st);
    TRY_THEN_PARK_AFTER(pid_t, R(waitpid)(-1, st, WNOHANG), p_ != 0, R(wait)(st), AFTER_ST);
}

HS_EXPORT pid_t waitpid(pid_t pid, int *st, int opt)
{
    if ((opt & WNOHANG) || !hs_enter())
        return R(waitpid)(pid, st, opt);
    TRY_THEN_PARK_AFTER(pid_t, R(waitpid)(pid, st, opt | WNOHANG), p_ != 0,
                        R(waitpid)(pid, st, opt), AFTER_ST);
}

HS_EXPORT pid_t wait3(int *st, int opt, struct rusage *ru)
{
    if ((opt & WNOHANG) || !hs_enter())
        return R(wait3)(st, opt, ru);
    TRY_THEN_PARK_AFTER(pid_t, R(wait3)(st, opt | WNOHANG, ru), p_ != 0, R(wait3)(st, opt, ru),
                        AFTER_ST);
}

HS_EXPORT pid_t wait4(pid_t pid, int *st, int opt, struct rusage *ru)
{
    if ((opt & WNOHANG) || !hs_enter())
        return R(wait4)(pid, st, opt, ru);
    TRY_THEN_PARK_AFTER(pid_t, R(wait4)(pid, st, opt | WNOHANG, ru), p_ != 0,
                        R(wait4)(pid, st, opt, ru), AFTER_ST);
}

HS_EXPORT int waitid(idtype_t t, id_t id, siginfo_t *info, int opt)
{
    if ((opt & WNOHANG) || !info || !hs_enter())
        return R(waitid)(t, id, info, opt);
    info->si_pid = 0;
    TRY_THEN_PARK_AFTER(int, R(waitid)(t, id, info, opt | WNOHANG), p_ != 0 || info->si_pid != 0,
                        R(waitid)(t, id, info, opt), AFTER_INFO);
}

HS_EXPORT int flock(int fd, int op)
{
    if ((op & LOCK_NB) || !hs_enter())
        return R(flock)(fd, op);
    TRY_THEN_PARK(int, R(flock)(fd, op | LOCK_NB), p_ == 0 || errno != EWOULDBLOCK, R(flock)(fd, op));
}
