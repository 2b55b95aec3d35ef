/* What the stdio wrappers share (wrap_stdio.c, wrap_printf.c): glibc's FILE flags, the
   looks at a stream, and how a call is caught. */
#ifndef HS_WRAP_STDIO_H
#define HS_WRAP_STDIO_H
#include "wrap.h"
#include <stdio.h>

/* glibc's FILE flags (libio, a stable ABI), of which the public header names only some */
#define HS_IO_UNBUFFERED 0x0002
#define HS_IO_NO_READS 0x0004
#define HS_IO_NO_WRITES 0x0008
#define HS_IO_LINE_BUF 0x0200
/* the stream's descriptor where it may sleep on it for `events`, else -1 */
HS_HIDDEN int hs_stream_fd(FILE *fp, short events);
/* whether `n` bytes written to `fp` (`nl`: with a newline among them) stay in its buffer */
HS_HIDDEN int hs_stays_buffered(FILE *fp, size_t n, int nl);
/* whether writing out what `fp` holds and `need` bytes more to `fd` may sleep */
HS_HIDDEN int hs_stream_write_may_sleep(FILE *fp, int fd, size_t need);

/* `call` as libc's, given up the token around it where it may sleep (`sleeps`, looked at
   with the stream's lock held: another thread may change it), or kept lazily around it
   where nobody waits (hs_idle_park). A thread that finds that
   lock held waits for it parked (its holder may be parked in a write, needing a token back
   before it lets it go), then makes its call holding a token again, `sleeps` looked at as
   for any other: made parked whole, the call wrote without a token, filling the pipe that
   a holder had just found room in, which then slept holding its token until the
   watchdog's bound (three threads writing one stdout through one token, 72-87 times in a
   0.8 s run). The _unlocked forms leave the lock to their caller, as libc does
   (ENTER_PARKED_IF). */
#define CAUGHT(type, fp, sleeps, call)                                                        \
    do {                                                                                      \
        if (!hs_enter())                                                                      \
            return call;                                                                      \
        if (ftrylockfile(fp) != 0) {                                                          \
            hs_park();                                                                        \
            flockfile(fp);                                                                    \
            hs_resume();                                                                      \
        }                                                                                     \
        int park_ = hs_idle_park();                                                           \
        if (!park_ && (sleeps)) {                                                             \
            hs_park();                                                                        \
            park_ = 1;                                                                        \
        }                                                                                     \
        type r_ = (call);                                                                     \
        int e_ = errno;                                                                       \
        if (park_)                                                                            \
            hs_resume();                                                                      \
        funlockfile(fp);                                                                      \
        hs_exit();                                                                            \
        errno = e_;                                                                           \
        return r_;                                                                            \
    } while (0)
#define CAUGHT_UNLOCKED(type, fp, sleeps, call) ENTER_PARKED_IF(type, sleeps, call)

#endif
