/* The interposed libc functions, part 3: stdio. A FILE fills and empties its buffer with
   libc's internal read and write, which no preloaded library sees (and Syscall User
   Dispatch lets libc's own system calls through), so a program reading or writing a pipe
   through stdio slept in the kernel holding its token: sha256sum (fread) at the end of
   `yes | head -c | sha256sum` kept one of two CPUs idle 40 % of the time while the other
   job's threads queued. Catching the reads alone made it worse: a reader that waits
   parked needs a token to drain the pipe again, and `head -c` (fwrite) slept on the full
   pipe holding one, until the watchdog's bound (40 ms) every few hundred kilobytes, 11x
   slower. So both sides are caught.

   A call that can be served from the buffer and what the descriptor holds (FIONREAD), or
   whose bytes fit the buffer and the pipe's room, runs as libc's; one that may sleep on a
   pipe, socket or terminal runs parked, the whole call, as read() and write() do
   (wrap_io.c): libc's own wait then takes signals as it would. Reads and writes of a line
   or a character, of a string, and fread and fwrite are caught; formatted output (printf
   and its kin) is not, its length being unknown before: its flush may sleep holding the
   token (the early look's "asleep" holder, then the watchdog's). Streams that are
   wide-oriented, without a descriptor, at end of file, in error or not open that way go
   straight to libc's functions. */
#include "wrap.h"
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
/* functions that bits/stdio.h makes macros of when optimising */
#undef fread_unlocked
#undef fwrite_unlocked
#undef fputs_unlocked
#undef fputc_unlocked
#undef putc_unlocked
#undef putchar_unlocked
#undef fgetc_unlocked
#undef getc_unlocked
#undef getchar_unlocked
#undef putc
#undef getc

/* glibc's FILE flags (libio, a stable ABI), of which the public header names only some */
#define HS_IO_NO_READS 0x0004
#define HS_IO_NO_WRITES 0x0008
/* the unit a pipe holds its bytes in: its reader's current page is not written to again */
#define PIPE_PAGE 4096

static size_t buffered(FILE *fp)  /* bytes read ahead into the buffer */
{
    return fp->_IO_read_ptr < fp->_IO_read_end ? (size_t)(fp->_IO_read_end - fp->_IO_read_ptr)
                                               : 0;
}

static size_t pending(FILE *fp)  /* bytes written to the buffer, not yet to the descriptor */
{
    return fp->_IO_write_ptr > fp->_IO_write_base
               ? (size_t)(fp->_IO_write_ptr - fp->_IO_write_base) : 0;
}

static size_t write_room(FILE *fp)  /* room left in the write buffer */
{
    return fp->_IO_write_end > fp->_IO_write_ptr ? (size_t)(fp->_IO_write_end - fp->_IO_write_ptr)
                                                 : 0;
}

/* the stream's descriptor where it may sleep on it for `events`, else -1 */
static int caught_fd(FILE *fp, short events)
{
    int no = events == POLLIN ? HS_IO_NO_READS | _IO_EOF_SEEN : HS_IO_NO_WRITES;
    return fp->_mode > 0 || (fp->_flags & (no | _IO_ERR_SEEN)) ? -1 : fp->_fileno;
}

/* whether `fd` is a file or block device, where a read or write never waits for a peer */
static int on_storage(int fd)
{
    struct stat st;
    int e = errno, ok = fstat(fd, &st) == 0;
    errno = e;
    return ok && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode));
}

/* the bytes `fd` holds to read now; -1 where it cannot say */
static long unread(int fd)
{
    int n = 0, e = errno, ok = ioctl(fd, FIONREAD, &n) == 0 && n >= 0;
    errno = e;
    return ok ? n : -1;
}

/* what a write to pipe `fd` takes without sleeping, -1 where it is no pipe: its size less
   what is unread, less a page (the page its reader is part way through) */
static long pipe_room(int fd)
{
    int e = errno, size = fcntl(fd, F_GETPIPE_SZ);
    errno = e;
    long left = size < 0 ? -1 : unread(fd);
    if (left < 0)
        return -1;
    long room = (long)size - left - PIPE_PAGE;
    return room > 0 ? room : 0;
}

static int nonblocking(int fd)
{
    int e = errno, fl = fcntl(fd, F_GETFL);
    errno = e;
    return fl >= 0 && (fl & O_NONBLOCK);
}

/* Whether a read of `want` bytes past the buffer's (0: up to a newline it does not hold)
   may sleep: not where the descriptor holds them, nor on storage, nor non-blocking. What a
   pipe holds cannot be searched for a newline: a line read parks once a buffer. */
static int read_may_sleep(int fd, size_t want)
{
    long n = want ? unread(fd) : -1;
    if (n >= 0 && (size_t)n >= want)
        return 0;
    return !on_storage(fd) && !nonblocking(fd);
}

/* Whether writing `need` bytes the buffer cannot take may sleep: not where the pipe has
   room for them and what is buffered, nor on storage, nor where a non-pipe is ready. */
static int write_may_sleep(FILE *fp, int fd, size_t need)
{
    long room = pipe_room(fd);
    size_t all;
    if (room >= 0)
        return (__builtin_add_overflow(pending(fp), need, &all) || (size_t)room < all)
               && !nonblocking(fd);
    return !on_storage(fd) && hs_would_block(fd, POLLOUT);
}

/* `call` as libc's, given up the token around it where it may sleep (`sleeps`) */
#define CAUGHT(type, sleeps, call)                                                            \
    do {                                                                                      \
        if (!hs_enter())                                                                      \
            return call;                                                                      \
        if (sleeps)                                                                           \
            PARKED(type, call);                                                               \
        hs_exit();                                                                            \
        return call;                                                                          \
    } while (0)

/* --- reads --------------------------------------------------------------------------------- */

/* a read of `want` bytes (0: a line, up to a newline) from `fp` may sleep */
static int reads_may_sleep(FILE *fp, size_t want)
{
    int fd = caught_fd(fp, POLLIN);
    if (fd < 0)
        return 0;
    size_t have = buffered(fp);
    if (want ? have >= want : have && memchr(fp->_IO_read_ptr, '\n', have))
        return 0;
    return read_may_sleep(fd, want ? want - have : 0);
}

static size_t bytes_of(size_t size, size_t count)
{
    size_t n;
    return __builtin_mul_overflow(size, count, &n) ? (size_t)-1 : n;
}

REAL(size_t, fread, (void *, size_t, size_t, FILE *));
REAL(size_t, fread_unlocked, (void *, size_t, size_t, FILE *));
REAL(char *, fgets, (char *, int, FILE *));
REAL(char *, fgets_unlocked, (char *, int, FILE *));
REAL(ssize_t, getline, (char **, size_t *, FILE *));
REAL(ssize_t, getdelim, (char **, size_t *, int, FILE *));
REAL(ssize_t, __getdelim, (char **, size_t *, int, FILE *));
REAL(int, fgetc, (FILE *));
REAL(int, getc, (FILE *));
REAL(int, _IO_getc, (FILE *));
REAL(int, fgetc_unlocked, (FILE *));
REAL(int, getc_unlocked, (FILE *));
REAL(int, getchar, (void));
REAL(int, getchar_unlocked, (void));
REAL(int, __uflow, (FILE *));
REAL(int, __underflow, (FILE *));

HS_EXPORT size_t fread(void *to, size_t size, size_t count, FILE *fp)
{
    CAUGHT(size_t, reads_may_sleep(fp, bytes_of(size, count)), R(fread)(to, size, count, fp));
}
HS_EXPORT size_t fread_unlocked(void *to, size_t size, size_t count, FILE *fp)
{
    CAUGHT(size_t, reads_may_sleep(fp, bytes_of(size, count)),
           R(fread_unlocked)(to, size, count, fp));
}
HS_EXPORT char *fgets(char *s, int n, FILE *fp)
{
    CAUGHT(char *, reads_may_sleep(fp, 0), R(fgets)(s, n, fp));
}
HS_EXPORT char *fgets_unlocked(char *s, int n, FILE *fp)
{
    CAUGHT(char *, reads_may_sleep(fp, 0), R(fgets_unlocked)(s, n, fp));
}
HS_EXPORT ssize_t getline(char **line, size_t *n, FILE *fp)
{
    CAUGHT(ssize_t, reads_may_sleep(fp, 0), R(getline)(line, n, fp));
}
/* a delimiter other than a newline: waits parked where the buffer is empty */
HS_EXPORT ssize_t getdelim(char **line, size_t *n, int delim, FILE *fp)
{
    CAUGHT(ssize_t, reads_may_sleep(fp, delim == '\n' ? 0 : 1),
           R(getdelim)(line, n, delim, fp));
}
HS_EXPORT ssize_t __getdelim(char **line, size_t *n, int delim, FILE *fp)
{
    CAUGHT(ssize_t, reads_may_sleep(fp, delim == '\n' ? 0 : 1),
           R(__getdelim)(line, n, delim, fp));
}
HS_EXPORT int fgetc(FILE *fp) { CAUGHT(int, reads_may_sleep(fp, 1), R(fgetc)(fp)); }
HS_EXPORT int getc(FILE *fp) { CAUGHT(int, reads_may_sleep(fp, 1), R(getc)(fp)); }
HS_EXPORT int _IO_getc(FILE *fp) { CAUGHT(int, reads_may_sleep(fp, 1), R(_IO_getc)(fp)); }
HS_EXPORT int fgetc_unlocked(FILE *fp)
{
    CAUGHT(int, reads_may_sleep(fp, 1), R(fgetc_unlocked)(fp));
}
HS_EXPORT int getc_unlocked(FILE *fp) { CAUGHT(int, reads_may_sleep(fp, 1), R(getc_unlocked)(fp)); }
HS_EXPORT int getchar(void) { CAUGHT(int, reads_may_sleep(stdin, 1), R(getchar)()); }
HS_EXPORT int getchar_unlocked(void)
{
    CAUGHT(int, reads_may_sleep(stdin, 1), R(getchar_unlocked)());
}
/* what getc_unlocked's inline form (a macro of stdio.h) calls once the buffer is empty */
HS_EXPORT int __uflow(FILE *fp) { CAUGHT(int, reads_may_sleep(fp, 1), R(__uflow)(fp)); }
HS_EXPORT int __underflow(FILE *fp) { CAUGHT(int, reads_may_sleep(fp, 1), R(__underflow)(fp)); }

/* --- writes -------------------------------------------------------------------------------- */

/* a write of `need` bytes to `fp` may sleep */
static int writes_may_sleep(FILE *fp, size_t need)
{
    int fd = caught_fd(fp, POLLOUT);
    return fd >= 0 && need >= write_room(fp) && write_may_sleep(fp, fd, need);
}

/* a flush of what `fp` holds may sleep */
static int flush_may_sleep(FILE *fp)
{
    int fd = caught_fd(fp, POLLOUT);
    return fd >= 0 && pending(fp) && write_may_sleep(fp, fd, 0);
}

REAL(size_t, fwrite, (const void *, size_t, size_t, FILE *));
REAL(size_t, fwrite_unlocked, (const void *, size_t, size_t, FILE *));
REAL(int, fputs, (const char *, FILE *));
REAL(int, fputs_unlocked, (const char *, FILE *));
REAL(int, puts, (const char *));
REAL(int, fputc, (int, FILE *));
REAL(int, putc, (int, FILE *));
REAL(int, _IO_putc, (int, FILE *));
REAL(int, putchar, (int));
REAL(int, fputc_unlocked, (int, FILE *));
REAL(int, putc_unlocked, (int, FILE *));
REAL(int, putchar_unlocked, (int));
REAL(int, __overflow, (FILE *, int));
REAL(int, fflush, (FILE *));
REAL(int, fflush_unlocked, (FILE *));

HS_EXPORT size_t fwrite(const void *from, size_t size, size_t count, FILE *fp)
{
    CAUGHT(size_t, writes_may_sleep(fp, bytes_of(size, count)), R(fwrite)(from, size, count, fp));
}
HS_EXPORT size_t fwrite_unlocked(const void *from, size_t size, size_t count, FILE *fp)
{
    CAUGHT(size_t, writes_may_sleep(fp, bytes_of(size, count)),
           R(fwrite_unlocked)(from, size, count, fp));
}
HS_EXPORT int fputs(const char *s, FILE *fp)
{
    CAUGHT(int, writes_may_sleep(fp, strlen(s)), R(fputs)(s, fp));
}
HS_EXPORT int fputs_unlocked(const char *s, FILE *fp)
{
    CAUGHT(int, writes_may_sleep(fp, strlen(s)), R(fputs_unlocked)(s, fp));
}
HS_EXPORT int puts(const char *s) { CAUGHT(int, writes_may_sleep(stdout, strlen(s) + 1), R(puts)(s)); }
HS_EXPORT int fputc(int c, FILE *fp) { CAUGHT(int, writes_may_sleep(fp, 1), R(fputc)(c, fp)); }
HS_EXPORT int putc(int c, FILE *fp) { CAUGHT(int, writes_may_sleep(fp, 1), R(putc)(c, fp)); }
HS_EXPORT int _IO_putc(int c, FILE *fp) { CAUGHT(int, writes_may_sleep(fp, 1), R(_IO_putc)(c, fp)); }
HS_EXPORT int putchar(int c) { CAUGHT(int, writes_may_sleep(stdout, 1), R(putchar)(c)); }
HS_EXPORT int fputc_unlocked(int c, FILE *fp)
{
    CAUGHT(int, writes_may_sleep(fp, 1), R(fputc_unlocked)(c, fp));
}
HS_EXPORT int putc_unlocked(int c, FILE *fp)
{
    CAUGHT(int, writes_may_sleep(fp, 1), R(putc_unlocked)(c, fp));
}
HS_EXPORT int putchar_unlocked(int c)
{
    CAUGHT(int, writes_may_sleep(stdout, 1), R(putchar_unlocked)(c));
}
/* what putc_unlocked's inline form calls once the buffer is full */
HS_EXPORT int __overflow(FILE *fp, int c) { CAUGHT(int, writes_may_sleep(fp, 1), R(__overflow)(fp, c)); }
/* a stream's buffered bytes all go out (NULL, every stream's: not caught) */
HS_EXPORT int fflush(FILE *fp)
{
    if (!fp)
        return R(fflush)(fp);
    CAUGHT(int, flush_may_sleep(fp), R(fflush)(fp));
}
HS_EXPORT int fflush_unlocked(FILE *fp)
{
    if (!fp)
        return R(fflush_unlocked)(fp);
    CAUGHT(int, flush_may_sleep(fp), R(fflush_unlocked)(fp));
}
