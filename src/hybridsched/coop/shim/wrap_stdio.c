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
   or a character, of a string, fread and fwrite, and formatted output (printf, fprintf,
   their v- and fortified forms, in wrap_printf.c) are caught; the last by its length, measured where it
   converts a string, else guessed (FORMAT_GUESS): a longer one may still flush on a full
   pipe holding the token (the early look's "asleep" holder, then the watchdog's), as may a
   line longer than what has arrived. Streams that are wide-oriented, without a
   descriptor, at end of file, in error or not open that way go straight to libc's
   functions. dprintf and vdprintf, which format into a buffer of their own and write it to
   a descriptor, are caught by the length they will write, measured first. The flush of
   every stream at the process's exit (libc's, after the destructors) comes once the
   shim's destructor has taken the thread out of its job: it has no token to sleep with. */
#include "wrap_stdio.h"
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

/* the unit a pipe holds its bytes in: its reader's current page is not written to again */
#define PIPE_PAGE 4096
/* how many of a pipe's pages its unread bytes are taken to fill, per page of them, for a
   line-buffered or unbuffered stream's writes (write_may_sleep): 2 assumes its pages at
   least half full. More parks writers of a pipe that has room (a hand-off each where
   others wait: `yes | head -c | sha256sum`, whose head writes a fully buffered stream,
   ran 5 % slower under coop with 2 for every stream); fewer lets a burst of writes find
   no free page, holding the token */
#define PARTIAL_PAGES_PER_PAGE 2

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

/* Whether `n` bytes written to `fp` (`nl`: with a newline among them) stay in its buffer:
   a line-buffered stream (a terminal's) keeps its write end at its write pointer, so that
   every write reaches libc's check for a newline, and goes out at one; an unbuffered one
   writes everything at once. */
int hs_stays_buffered(FILE *fp, size_t n, int nl)
{
    if (fp->_flags & HS_IO_UNBUFFERED)
        return 0;
    char *end = fp->_flags & HS_IO_LINE_BUF ? fp->_IO_buf_end : fp->_IO_write_end;
    return !((fp->_flags & HS_IO_LINE_BUF) && nl) && fp->_IO_write_ptr < end
           && n < (size_t)(end - fp->_IO_write_ptr);
}

/* the stream's descriptor where it may sleep on it for `events`, else -1 */
int hs_stream_fd(FILE *fp, short events)
{
    int no = events == POLLIN ? HS_IO_NO_READS | _IO_EOF_SEEN : HS_IO_NO_WRITES;
    return fp->_mode > 0 || (fp->_flags & (no | _IO_ERR_SEEN)) ? -1 : fp->_fileno;
}

/* the kind of file `fd` is (S_IFMT bits), 0 where fstat fails */
static unsigned kind(int fd)
{
    struct stat st;
    int e = errno, ok = fstat(fd, &st) == 0;
    errno = e;
    return ok ? st.st_mode & S_IFMT : 0;
}

/* a file or block device: a read or write there never waits for a peer */
static int on_storage(int fd)
{
    unsigned k = kind(fd);
    return k == S_IFREG || k == S_IFBLK;
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
static long pipe_room(int fd, long pages_per_page)
{
    int e = errno, size = fcntl(fd, F_GETPIPE_SZ);
    errno = e;
    long left = size < 0 ? -1 : unread(fd);
    if (left < 0)
        return -1;
    long room = (long)size - pages_per_page * left - PIPE_PAGE;
    return room > 0 ? room : 0;
}

/* Whether a read of `want` bytes past the buffer's (0: up to a delimiter the buffer does not
   hold) may sleep: not where the descriptor holds them (for a delimiter, anything: a
   writer's buffer goes out in whole lines mostly, and what a pipe holds cannot be searched,
   so a record longer than what has arrived may still sleep inside, holding the token),
   nor on storage, nor where it is non-blocking. */
static int read_may_sleep(int fd, size_t want)
{
    long n = unread(fd);
    if (n < 0)  /* a device FIONREAD knows nothing of (/dev/null): whether it is ready */
        return !on_storage(fd) && hs_would_block(fd, POLLIN);
    return (size_t)n < (want ? want : 1) && !on_storage(fd) && !hs_nonblocking(fd);
}

/* Whether writing `n` bytes to `fd` may sleep. Up to a page: only where the descriptor is
   not writable now (a pipe's free page takes it; a non-blocking descriptor that is not
   writable gets EAGAIN, parked for nothing). More: where a pipe has no room for them (poll
   says "writable" at one free page: cat's 128 KiB writes slept holding the token), a
   socket (poll's "writable" is some room, not this much), or anything else not writable
   now; never on storage. Also write(), writev() and send*() (wrap_io.c). */
static int may_sleep_writing(int fd, size_t n, long pages_per_page)
{
    if (n <= PIPE_PAGE)
        return !hs_ready(fd, POLLOUT);
    long room = pipe_room(fd, pages_per_page);
    if (room >= 0)
        return (size_t)room < n && !hs_nonblocking(fd);
    unsigned k = kind(fd);
    if (k == S_IFREG || k == S_IFBLK)
        return 0;
    return (k == S_IFSOCK && !hs_nonblocking(fd)) || !hs_ready(fd, POLLOUT);
}

int hs_write_may_sleep(int fd, size_t n)
{
    return may_sleep_writing(fd, n, 1);
}

/* Whether writing out what `fp` holds and `need` bytes more may sleep. libc fills the
   buffer, writes it out whole, writes whole buffers of the rest straight from the caller's
   bytes and keeps what is left (glibc's _IO_new_file_xsputn; not for buffers under 128
   bytes): less than two buffers in all go out in one write of a buffer, which a pipe takes
   where it has a free page (poll), however full its other pages. Counted in bytes, such a
   write looked as if it fit where earlier short writes (fflush) had left pages part full:
   three threads writing one stdout through one token slept in write holding it. */
int hs_stream_write_may_sleep(FILE *fp, int fd, size_t need)
{
    size_t size = (size_t)(fp->_IO_buf_end - fp->_IO_buf_base), all;
    if (__builtin_add_overflow(pending(fp), need, &all))
        all = (size_t)-1;
    if (!(fp->_flags & (HS_IO_UNBUFFERED | HS_IO_LINE_BUF)) && size >= 128 && all / 2 < size
        && size < all) {
        all = size;
        return hs_write_may_sleep(fd, all);
    }
    /* Several writes from this one look: the buffer, whole buffers of the caller's bytes,
       and on a line-buffered or unbuffered stream the rest at each newline, a write that is
       not a whole page and leaves one part full, which a whole page never joins. There the
       pipe's unread bytes are counted as filling twice their pages: three threads writing
       8193-byte records to a line-buffered stdout slept holding the token, revoked 26-35
       times, 0.32-0.42 s against 0.032 s now (0.02 s plain). */
    int partial = (fp->_flags & (HS_IO_UNBUFFERED | HS_IO_LINE_BUF)) != 0;
    return may_sleep_writing(fd, all, partial ? PARTIAL_PAGES_PER_PAGE : 1);
}

/* A program's own hold of a stream's lock (flockfile around a run of putc_unlocked, say):
   one another thread holds is waited for parked, as the wrappers wait (CAUGHT), since its
   holder may be parked in a write and need a token back before it lets go. Three threads
   taking stdout's lock around each 8193-byte record through one token slept in flockfile
   holding theirs: 1.6-1.7 s and revoked 40-42 times, against 0.07 s plain (the review). */
REAL(void, flockfile, (FILE *));

HS_EXPORT void flockfile(FILE *fp)
{
    if (!hs_enter()) {
        R(flockfile)(fp);
        return;
    }
    if (ftrylockfile(fp) != 0) {
        hs_park();
        R(flockfile)(fp);
        hs_resume();
    }
    hs_exit();
}

/* --- reads --------------------------------------------------------------------------------- */

/* a read from `fp` of `want` bytes, or (`delim` >= 0) of bytes up to `delim`, may sleep */
static int reads_may_sleep(FILE *fp, size_t want, int delim)
{
    int fd = hs_stream_fd(fp, POLLIN);
    if (fd < 0)
        return 0;
    size_t have = buffered(fp);
    if (delim >= 0 ? have && memchr(fp->_IO_read_ptr, delim, have) : have >= want)
        return 0;
    return read_may_sleep(fd, delim >= 0 ? 0 : want - have);
}
#define BYTES(fp, n) reads_may_sleep(fp, n, -1)
#define UP_TO(fp, delim) reads_may_sleep(fp, 0, delim)

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
    CAUGHT(size_t, fp, BYTES(fp, bytes_of(size, count)), R(fread)(to, size, count, fp));
}
HS_EXPORT size_t fread_unlocked(void *to, size_t size, size_t count, FILE *fp)
{
    CAUGHT_UNLOCKED(size_t, fp, BYTES(fp, bytes_of(size, count)),
                    R(fread_unlocked)(to, size, count, fp));
}
HS_EXPORT char *fgets(char *s, int n, FILE *fp)
{
    CAUGHT(char *, fp, n > 1 && UP_TO(fp, '\n'), R(fgets)(s, n, fp));
}
HS_EXPORT char *fgets_unlocked(char *s, int n, FILE *fp)
{
    CAUGHT_UNLOCKED(char *, fp, n > 1 && UP_TO(fp, '\n'), R(fgets_unlocked)(s, n, fp));
}
HS_EXPORT ssize_t getline(char **line, size_t *n, FILE *fp)
{
    CAUGHT(ssize_t, fp, UP_TO(fp, '\n'), R(getline)(line, n, fp));
}
HS_EXPORT ssize_t getdelim(char **line, size_t *n, int delim, FILE *fp)
{
    CAUGHT(ssize_t, fp, UP_TO(fp, (unsigned char)delim), R(getdelim)(line, n, delim, fp));
}
HS_EXPORT ssize_t __getdelim(char **line, size_t *n, int delim, FILE *fp)
{
    CAUGHT(ssize_t, fp, UP_TO(fp, (unsigned char)delim), R(__getdelim)(line, n, delim, fp));
}
HS_EXPORT int fgetc(FILE *fp) { CAUGHT(int, fp, BYTES(fp, 1), R(fgetc)(fp)); }
HS_EXPORT int getc(FILE *fp) { CAUGHT(int, fp, BYTES(fp, 1), R(getc)(fp)); }
HS_EXPORT int _IO_getc(FILE *fp) { CAUGHT(int, fp, BYTES(fp, 1), R(_IO_getc)(fp)); }
HS_EXPORT int fgetc_unlocked(FILE *fp)
{
    CAUGHT_UNLOCKED(int, fp, BYTES(fp, 1), R(fgetc_unlocked)(fp));
}
HS_EXPORT int getc_unlocked(FILE *fp)
{
    CAUGHT_UNLOCKED(int, fp, BYTES(fp, 1), R(getc_unlocked)(fp));
}
HS_EXPORT int getchar(void) { CAUGHT(int, stdin, BYTES(stdin, 1), R(getchar)()); }
HS_EXPORT int getchar_unlocked(void)
{
    CAUGHT_UNLOCKED(int, stdin, BYTES(stdin, 1), R(getchar_unlocked)());
}
/* what getc_unlocked's inline form (a macro of stdio.h) calls once the buffer is empty */
HS_EXPORT int __uflow(FILE *fp) { CAUGHT_UNLOCKED(int, fp, BYTES(fp, 1), R(__uflow)(fp)); }
HS_EXPORT int __underflow(FILE *fp) { CAUGHT_UNLOCKED(int, fp, BYTES(fp, 1), R(__underflow)(fp)); }

/* --- writes -------------------------------------------------------------------------------- */

/* a write of `n` bytes to `fp` (`nl`: a newline among them) may sleep */
static int writes_may_sleep(FILE *fp, size_t n, int nl)
{
    int fd = hs_stream_fd(fp, POLLOUT);
    return fd >= 0 && !hs_stays_buffered(fp, n, nl) && hs_stream_write_may_sleep(fp, fd, n);
}
#define CHAR(fp, c) writes_may_sleep(fp, 1, (c) == '\n')
/* a newline matters to a line-buffered stream alone: no search of the others' text */
#define TEXT(fp, s, extra_nl) writes_may_sleep(fp, strlen(s) + (extra_nl), (extra_nl) \
                                               || (((fp)->_flags & HS_IO_LINE_BUF) \
                                                   && strchr(s, '\n') != NULL))
#define DATA(fp, p, n) writes_may_sleep(fp, n, ((fp)->_flags & HS_IO_LINE_BUF) \
                                               && memchr(p, '\n', n) != NULL)

/* a flush of what `fp` holds may sleep */
static int flush_may_sleep(FILE *fp)
{
    int fd = hs_stream_fd(fp, POLLOUT);
    return fd >= 0 && pending(fp) && hs_stream_write_may_sleep(fp, fd, 0);
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
REAL(int, fclose, (FILE *));

HS_EXPORT size_t fwrite(const void *from, size_t size, size_t count, FILE *fp)
{
    size_t n = bytes_of(size, count);
    CAUGHT(size_t, fp, n && DATA(fp, from, n), R(fwrite)(from, size, count, fp));
}
HS_EXPORT size_t fwrite_unlocked(const void *from, size_t size, size_t count, FILE *fp)
{
    size_t n = bytes_of(size, count);
    CAUGHT_UNLOCKED(size_t, fp, n && DATA(fp, from, n), R(fwrite_unlocked)(from, size, count, fp));
}
HS_EXPORT int fputs(const char *s, FILE *fp) { CAUGHT(int, fp, TEXT(fp, s, 0), R(fputs)(s, fp)); }
HS_EXPORT int fputs_unlocked(const char *s, FILE *fp)
{
    CAUGHT_UNLOCKED(int, fp, TEXT(fp, s, 0), R(fputs_unlocked)(s, fp));
}
HS_EXPORT int puts(const char *s) { CAUGHT(int, stdout, TEXT(stdout, s, 1), R(puts)(s)); }
HS_EXPORT int fputc(int c, FILE *fp) { CAUGHT(int, fp, CHAR(fp, c), R(fputc)(c, fp)); }
HS_EXPORT int putc(int c, FILE *fp) { CAUGHT(int, fp, CHAR(fp, c), R(putc)(c, fp)); }
HS_EXPORT int _IO_putc(int c, FILE *fp) { CAUGHT(int, fp, CHAR(fp, c), R(_IO_putc)(c, fp)); }
HS_EXPORT int putchar(int c) { CAUGHT(int, stdout, CHAR(stdout, c), R(putchar)(c)); }
HS_EXPORT int fputc_unlocked(int c, FILE *fp)
{
    CAUGHT_UNLOCKED(int, fp, CHAR(fp, c), R(fputc_unlocked)(c, fp));
}
HS_EXPORT int putc_unlocked(int c, FILE *fp)
{
    CAUGHT_UNLOCKED(int, fp, CHAR(fp, c), R(putc_unlocked)(c, fp));
}
HS_EXPORT int putchar_unlocked(int c)
{
    CAUGHT_UNLOCKED(int, stdout, CHAR(stdout, c), R(putchar_unlocked)(c));
}
/* what putc_unlocked's inline form calls once the buffer is full */
HS_EXPORT int __overflow(FILE *fp, int c)
{
    CAUGHT_UNLOCKED(int, fp, CHAR(fp, c), R(__overflow)(fp, c));
}
/* a stream's buffered bytes all go out (NULL, every stream's: not caught) */
HS_EXPORT int fflush(FILE *fp)
{
    if (!fp)
        return R(fflush)(fp);
    CAUGHT(int, fp, flush_may_sleep(fp), R(fflush)(fp));
}
HS_EXPORT int fflush_unlocked(FILE *fp)
{
    if (!fp)
        return R(fflush_unlocked)(fp);
    CAUGHT_UNLOCKED(int, fp, flush_may_sleep(fp), R(fflush_unlocked)(fp));
}
/* its flush (the stream is gone after it: no lock of ours to give back) */
HS_EXPORT int fclose(FILE *fp) { CAUGHT_UNLOCKED(int, fp, flush_may_sleep(fp), R(fclose)(fp)); }
