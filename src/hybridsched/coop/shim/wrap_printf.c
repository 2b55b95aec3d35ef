/* The interposed libc functions, part 3b: formatted output to a stream (printf, fprintf,
   their v- and fortified forms), caught as wrap_stdio.c catches stdio's other writes,
   by the length they add; and dprintf and vdprintf, which format into a buffer of their
   own and write it to a descriptor, by the length they will write, measured first. */
#include "wrap_stdio.h"

/* The length of a formatted write with no string in it (numbers, characters, pointers),
   known only once made: one whose buffer has this much room left is taken to fit it;
   one that has less runs parked where the pipe cannot take what is buffered and this much
   more. Larger makes more of them wait for the pipe's room (a park, and a hand-off where
   others wait); smaller lets more longer ones flush on a full pipe holding the token. */
#define FORMAT_GUESS 512

/* the length of what `f` makes of `ap`: formatted once more, with no buffer of ours */
static size_t formatted_length(const char *f, va_list ap)
{
    va_list copy;
    va_copy(copy, ap);
    int e = errno, n = vsnprintf(NULL, 0, f, copy);
    errno = e;
    va_end(copy);
    return n < 0 ? 0 : (size_t)n;
}

/* a character of a conversion before its letter: flags, width, precision, length */
static int in_conversion(char c)
{
    return (c >= '0' && c <= '9') || (c && strchr(".*-+ #'$IhlLqjzt", c));
}

/* whether `f` converts a string (%s, %ls, %S), the one conversion of no bounded length.
   (strspn here cost 18 % of a short printf's time: glibc builds a table each call.) */
static int converts_string(const char *f)
{
    for (const char *p = strchr(f, '%'); p; p = strchr(p, '%')) {
        p++;
        if (*p == '%') {
            p++;
            continue;
        }
        while (in_conversion(*p))
            p++;
        if (*p == 's' || *p == 'S')
            return 1;
    }
    return 0;
}

/* What a formatted write adds: measured where a string may make it long (printf of 8 KB
   lines flushed on a full pipe holding the token, revoked 31 times in 1.4 s against
   0.03 s plain: the review), else guessed, saving the second formatting of the common
   line of numbers. On a line-buffered stream the text may hold a newline, which flushes
   it. */
static int formats_may_sleep(FILE *fp, const char *f, va_list ap)
{
    int fd = hs_stream_fd(fp, POLLOUT);
    if (fd < 0)
        return 0;
    size_t n = converts_string(f) ? formatted_length(f, ap) : FORMAT_GUESS;
    return !hs_stays_buffered(fp, n, (fp->_flags & HS_IO_LINE_BUF) != 0)
           && hs_stream_write_may_sleep(fp, fd, n);
}

REAL(int, vfprintf, (FILE *, const char *, va_list));
REAL(int, __vfprintf_chk, (FILE *, int, const char *, va_list));

HS_EXPORT int vfprintf(FILE *fp, const char *f, va_list ap)
{
    CAUGHT(int, fp, formats_may_sleep(fp, f, ap), R(vfprintf)(fp, f, ap));
}
HS_EXPORT int vprintf(const char *f, va_list ap)
{
    CAUGHT(int, stdout, formats_may_sleep(stdout, f, ap), R(vfprintf)(stdout, f, ap));
}
HS_EXPORT int __vfprintf_chk(FILE *fp, int flag, const char *f, va_list ap)
{
    CAUGHT(int, fp, formats_may_sleep(fp, f, ap), R(__vfprintf_chk)(fp, flag, f, ap));
}
HS_EXPORT int __vprintf_chk(int flag, const char *f, va_list ap)
{
    CAUGHT(int, stdout, formats_may_sleep(stdout, f, ap), R(__vfprintf_chk)(stdout, flag, f, ap));
}

/* the variadic forms, by way of the va_list ones (as libc's own are) */
#define FORMATTED(fp, call_ap)                                                                \
    do {                                                                                      \
        va_list ap;                                                                           \
        va_start(ap, f);                                                                      \
        int r = call_ap;                                                                      \
        va_end(ap);                                                                           \
        return r;                                                                             \
    } while (0)

HS_EXPORT int fprintf(FILE *fp, const char *f, ...) { FORMATTED(fp, vfprintf(fp, f, ap)); }
HS_EXPORT int printf(const char *f, ...) { FORMATTED(stdout, vfprintf(stdout, f, ap)); }
HS_EXPORT int __fprintf_chk(FILE *fp, int flag, const char *f, ...)
{
    FORMATTED(fp, __vfprintf_chk(fp, flag, f, ap));
}
HS_EXPORT int __printf_chk(int flag, const char *f, ...)
{
    FORMATTED(stdout, __vfprintf_chk(stdout, flag, f, ap));
}

/* A descriptor's formatted write: its length measured first (formatted twice, with no
   buffer of ours: dprintf is for what cannot allocate), then looked at as write() looks at
   its bytes. A guessed length instead let lines of 8-70 KB sleep on a full pipe holding
   the token, revoked at every line (the review: 12 s against 2 s uncaught). */
REAL(int, vdprintf, (int, const char *, va_list));
REAL(int, __vdprintf_chk, (int, int, const char *, va_list));

HS_EXPORT int vdprintf(int fd, const char *f, va_list ap)
{
    ENTER_PARKED_IF(int, hs_write_may_sleep(fd, formatted_length(f, ap)), R(vdprintf)(fd, f, ap));
}
HS_EXPORT int __vdprintf_chk(int fd, int flag, const char *f, va_list ap)
{
    ENTER_PARKED_IF(int, hs_write_may_sleep(fd, formatted_length(f, ap)),
                    R(__vdprintf_chk)(fd, flag, f, ap));
}
HS_EXPORT int dprintf(int fd, const char *f, ...) { FORMATTED(fd, vdprintf(fd, f, ap)); }
HS_EXPORT int __dprintf_chk(int fd, int flag, const char *f, ...)
{
    FORMATTED(fd, __vdprintf_chk(fd, flag, f, ap));
}
