/* The process's view of the arbiter's segment, apart from the rules: mapping the segment
   and checking it is a private one of this layout, the liveness rule the reclaim of dead
   and stopped holders uses (procfs.pid_alive, thread_alive and thread_stopped's), the CPUs
   the program would have had, and the one line a process that cannot join says before it
   runs unmanaged. */
#include "coop.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static cpu_set_t hs_natural;

void hs_natural_mask(cpu_set_t *out, int own)
{
    *out = own && hs_t.has_mask ? hs_t.mask : hs_natural;
}

/* /proc/PID[/task/TID]/NAME (tid 0: the process's) into buf, NUL-terminated: its length,
   or -1 with errno (ENOENT: no such task). By raw system calls: libc's open, read and
   close are cancellation points, and this runs in a thread's token wait (an early look),
   where a pending pthread_cancel acted on unwound the thread inside the shim, a condition
   variable's mutex let go: its cleanup handler ran without the mutex (the review, 19 of 20
   cancels of a polling thread once its token waits were long; rare but possible at any
   length). */
ssize_t hs_task_file(int pid, int tid, const char *name, char *buf, size_t size)
{
    char path[80];
    if (tid > 0)
        snprintf(path, sizeof path, "/proc/%d/task/%d/%s", pid, tid, name);
    else
        snprintf(path, sizeof path, "/proc/%d/%s", pid, name);
    long fd = hs_raw(SYS_openat, AT_FDCWD, (long)path, O_RDONLY | O_CLOEXEC, 0, 0, 0);
    if (fd < 0) {
        errno = (int)-fd;
        return -1;
    }
    long n = hs_raw(SYS_read, fd, (long)buf, (long)(size - 1), 0, 0, 0);
    hs_raw(SYS_close, fd, 0, 0, 0, 0, 0);
    if (n < 0) {
        errno = (int)-n;
        return -1;
    }
    buf[n] = 0;
    return n;
}

static int task_state(int pid, int tid, char *out)
{
    char buf[256];
    ssize_t n = hs_task_file(pid, tid, "stat", buf, sizeof buf);
    if (n <= 0)
        return n == 0 || errno == ENOENT ? 0 : -1;
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || !p[2])
        return -1;
    *out = p[2];
    return 1;
}

int hs_alive(void *ctx, int32_t pid, int32_t tid)
{
    (void)ctx;
    if (pid <= 0)
        return 0;
    if (tid <= 0 && kill(pid, 0) != 0 && errno == ESRCH)
        return 0;
    char s;
    int r = task_state(pid, tid, &s);
    if (r == 0)
        return 0;
    if (r < 0)  /* /proc cannot tell: alive while the process exists */
        return tid > 0 ? hs_alive(ctx, pid, 0) : 1;
    if (s == 'Z' || s == 'X')
        return 0;
    return s == 'T' || s == 't' ? HS_STOPPED : 1;
}

int hs_traced(int32_t pid, int32_t tid)
{
    char s;
    return task_state(pid, tid, &s) > 0 && s == 't';
}

int hs_self_traced(int tid)
{
    char buf[320];  /* TracerPid is its eighth line: ~150 bytes in */
    if (hs_task_file(hs_self_pid(), tid, "status", buf, sizeof buf) <= 0)
        return 0;
    const char *t = strstr(buf, "\nTracerPid:");
    return t && atoi(t + 11) != 0;
}

void hs_warn(const char *fmt, const char *a, const char *b)
{
    dprintf(2, "hybridsched coop shim: ");
    dprintf(2, fmt, a, b);
    dprintf(2, "; this process runs unmanaged\n");
}

/* the segment at `path` mapped as hs_v once checked; its size, 0 (and a warning) if not */
size_t hs_map_segment(const char *path)
{
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        hs_warn("cannot open the coop segment %s (%s)", path, strerror(errno));
        return 0;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077)
        || (size_t)st.st_size < sizeof(struct hs_header)) {
        close(fd);
        hs_warn("%s is not a private coop segment of this user%s", path, "");
        return 0;
    }
    void *p = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        hs_warn("cannot map %s (%s)", path, strerror(errno));
        return 0;
    }
    struct hs_header *h = p;
    char have[16];
    snprintf(have, sizeof have, "%d", h->version);
    if (memcmp(h->magic, HS_MAGIC, 8) != 0 || h->version != HS_VERSION
        || hs_view_init(&hs_v, p, h->ncpu, h->max_jobs, h->max_workers) > (size_t)st.st_size) {
        munmap(p, st.st_size);
        hs_warn("%s: not a coop segment of this layout (version %s)", path, have);
        return 0;
    }
    return st.st_size;
}

/* "0,1,5": the CPUs the program would have had (its launcher's): what its affinity
   queries are answered with, whatever CPU its threads are pinned to now */
void hs_natural_cpus(const char *list)
{
    CPU_ZERO(&hs_natural);
    for (const char *s = list; s && *s;) {
        char *end;
        long c = strtol(s, &end, 10);
        if (end == s)
            break;
        if (c >= 0 && c < CPU_SETSIZE)
            CPU_SET(c, &hs_natural);
        s = *end == ',' ? end + 1 : end;
    }
    if (CPU_COUNT(&hs_natural) == 0)
        hs_real_getaffinity(0, sizeof hs_natural, &hs_natural);
}
