/* The process and its threads as members of the command's job: the segment mapped and the
   job found at load (hs_init), each thread registered as a worker when it starts and given
   up when it ends, the exec'ing thread keeping its slot across an exec, a fork's child
   joining as a new thread. */
#include "coop.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int64_t hs_key;
int hs_pid;
static pthread_key_t hs_exit_key;

/* the pid that registered the job, as it was when this image attached: a watchdog's
   signal still in flight when its job's row went to another job stays recognised (not
   ours, it would now take the signal's default action) */
static int hs_launcher = -1;

int hs_launcher_pid(void)
{
    return hs_launcher;
}

int hs_self_pid(void)
{
    return hs_pid;
}

int64_t hs_job_key(void)
{
    return hs_key;
}

/* the rotation signal is the shim's when the job's launcher (its watchdog) sent it, or a
   thread of the job queued it with the job's key as the cookie (early_look) */
int hs_nudge_is_ours(const siginfo_t *si)
{
    if (si->si_code == SI_TKILL)
        return si->si_pid == hs_launcher_pid();
    return si->si_code == SI_QUEUE && (intptr_t)si->si_value.sival_ptr == (intptr_t)hs_key;
}

static void reset_thread(void)
{
    hs_t.tid = gettid();
    hs_t.slot = -1;
    hs_t.parked = HS_PARK_NONE;
    hs_t.yields = 0;
    hs_t.releases = 0;
    hs_t.spin_at = 0;
    hs_t.unsignalled = NULL;
    hs_t.has_mask = 0;
    hs_t.pending = HS_PEND_NONE;
    hs_t.armed = 0;
    hs_t.selector = HS_SUD_ALLOW;
}

static void start(int slot)
{
    hs_t.slot = slot;
    pthread_setspecific(hs_exit_key, (void *)1);  /* hs_thread_end at the thread's exit */
    hs_sud_arm();
}

/* Whether the calling thread can be managed. A seccomp filter the program installs after
   our start (a sandbox's allowlist) may refuse what the rules need to tell its liveness:
   its thread id, its /proc files. Such a thread joined with id -1, held a token nobody
   could reclaim, and the program hung (the review): it runs unmanaged instead, said once. */
static int manageable(void)
{
    static int said;
    const char *what = NULL;
    int err = 0, fd;
    if (hs_t.tid <= 0) {
        what = "gettid";
        err = hs_t.tid < 0 ? -hs_t.tid : EPERM;  /* glibc's gives the raw -errno back */
    } else if ((fd = open("/", O_PATH | O_CLOEXEC)) >= 0) {  /* the cheapest open there is:
                                                                 /proc's file cost 30 µs */
        close(fd);
    } else if (errno == EPERM || errno == EACCES || errno == ENOSYS) {
        what = "open";
        err = errno;
    }
    if (!what)
        return 1;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) {
        char line[200];  /* one write: not through the stdio we wrap */
        int n = snprintf(line, sizeof line, "hybridsched coop shim: %s refused here (%s: a "
                         "seccomp filter?); threads started from now run unmanaged\n", what,
                         strerror(err));
        if (n > 0 && write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0) {
            /* nowhere to say it */
        }
    }
    return 0;
}

/* Every worker slot of the arbiter taken (a node's jobs have that many threads): the
   thread runs unmanaged, time-sliced by Linux, counted (`unmanaged`) and said once a
   process, so that a measurement under coop never passes for one it was not. */
static void said_full(void)
{
    static pid_t said;  /* by which process: a fork's child inherits it, and says it too */
    pid_t me = getpid();
    if (__atomic_exchange_n(&said, me, __ATOMIC_RELAXED) == me)
        return;
    char line[240];  /* one write: not through the stdio we wrap */
    int n = snprintf(line, sizeof line, "hybridsched coop shim: the arbiter's %d thread slots "
                     "are all taken; threads of this process started meanwhile run unmanaged "
                     "(Linux time-slices them)\n", hs_v.nworkers);
    if (n > 0 && write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0) {
        /* nowhere to say it */
    }
}

/* the calling thread (new, or the child of a fork) joins the job and waits for a token */
void hs_thread_begin(void)
{
    if (!hs_on)
        return;
    reset_thread();
    hs_t.depth = 1;
    struct hs_cs cs;
    int w = -1;
    if (!manageable()) {
        hs_exit();
        return;
    }
    hs_cs_lock(&cs);
    if (hs_v.jobs[hs_job].used == 1 && hs_v.jobs[hs_job].key == hs_key)
        w = hs_join_worker(&hs_v, hs_job, hs_pid, hs_t.tid, 1);
    hs_cs_unlock(&cs);
    if (w >= 0) {  /* else the job is gone, or the tables are full: unmanaged */
        hs_count(HS_C_THREADS);
        start(w);
        hs_acquire(w);
    } else if (hs_v.jobs[hs_job].used == 1 && hs_v.jobs[hs_job].key == hs_key) {
        hs_count(HS_C_UNMANAGED);
        said_full();
    }
    hs_exit();
}

/* at the thread's exit (a TLS destructor), at _exit and at the process's exit */
void hs_thread_end(void *unused)
{
    (void)unused;
    int me = hs_t.slot;
    /* a vfork child shares its parent thread's TLS: the slot there is the parent's */
    if (!hs_on || me < 0 || getpid() != hs_pid)
        return;
    hs_t.depth++;
    hs_sud_disarm();
    int signaller = me;  /* its slot may go to a thread that never signalled */
    __atomic_compare_exchange_n(&hs_last_signaller, &signaller, -1, 0, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
    struct hs_cs cs;
    hs_cs_lock(&cs);
    if (hs_own(me)) {
        int w = hs_rule_leave_worker(&hs_v, me, hs_now_ns());
        if (w >= 0)
            hs_count(HS_C_HANDOFFS);
        hs_cs_add(&cs, w);
    }
    hs_cs_unlock(&cs);
    hs_t.slot = -1;
    hs_t.depth--;
}

/* The process's first thread: after an exec, the exec'ing thread finds its slot (and its
   token) under its pid and tid and keeps it; the slots of the threads the exec ended are
   given up. Otherwise it joins like any thread. */
static void main_thread_begin(void)
{
    reset_thread();
    hs_t.depth = 1;
    struct hs_cs cs;
    int mine = -1;
    hs_cs_lock(&cs);
    for (int w = 0; w < hs_v.h->hi; w++) {
        struct hs_worker *r = &hs_v.workers[w];
        if (r->used != 1 || r->pid != hs_pid || r->job != hs_job || !r->thread)
            continue;
        if (r->tid == hs_t.tid && mine < 0)
            mine = w;
        else
            hs_cs_add(&cs, hs_rule_leave_worker(&hs_v, w, hs_now_ns()));
    }
    hs_cs_unlock(&cs);
    if (mine < 0) {
        hs_t.depth = 0;
        hs_thread_begin();
        return;
    }
    start(mine);
    hs_acquire(mine);  /* held already (RUNNING): keeps it, pinned where it was */
    hs_exit();
}

static void atfork_child(void)
{
    if (!hs_on)
        return;
    hs_pid = getpid();
    hs_thread_begin();  /* a new thread: the parent's slot stays the parent's */
}

/* the segment mapped and checked (segment.c), then the command's job found by its key */
static int attach(const char *path, int64_t key)
{
    size_t size = hs_map_segment(path);
    if (!size)
        return -1;
    struct hs_cs cs;
    hs_cs_lock(&cs);
    hs_job = hs_find_job(&hs_v, key);
    if (hs_job >= 0)
        hs_launcher = hs_v.jobs[hs_job].pid;
    hs_cs_unlock(&cs);
    if (hs_job < 0) {
        munmap(hs_v.h, size);
        hs_warn("no job %s on %s (its launcher has gone)", getenv("HYBRIDSCHED_COOP_JOB"), path);
        return -1;
    }
    hs_key = key;
    return 0;
}

/* whether this process's PID namespace is not `want` (its /proc/self/ns/pid inode, given
   by the launcher; unknown either way: as before, the same) */
static int other_pid_namespace(const char *want)
{
    struct stat st;
    if (!want || !*want || stat("/proc/self/ns/pid", &st) != 0)
        return 0;
    return (unsigned long long)st.st_ino != strtoull(want, NULL, 10);
}

__attribute__((constructor)) static void hs_init(void)
{
    /* first, dormant or not: the wrappers that pass a dormant process's calls on make them
       through these (a syscall(SYS_futex) jumped to address 0, the hostile review) */
    hs_resolve();
    const char *seg = getenv("HYBRIDSCHED_COOP_SEGMENT"), *key = getenv("HYBRIDSCHED_COOP_JOB");
    if (!seg || !key || !*seg || !*key)
        return;  /* loaded but not launched by hybridsched (a test's ctypes): dormant */
    if (other_pid_namespace(getenv("HYBRIDSCHED_COOP_PIDNS"))) {
        dprintf(2, "hybridsched coop shim: this process is in another PID namespace than its "
                "job's arbiter, whose thread ids name other threads; it runs unmanaged, and "
                "so does what it starts\n");
        /* what it starts: dormant without a word (once per job, not per program; the
           review), and a `coop exec` inside with an arbiter of its own is no nested one */
        unsetenv("HYBRIDSCHED_COOP_JOB");
        return;
    }
    if (attach(seg, strtoll(key, NULL, 10)) != 0)
        return;
    hs_natural_cpus(getenv("HYBRIDSCHED_COOP_CPUS"));
    hs_pid = getpid();
    if (pthread_key_create(&hs_exit_key, hs_thread_end) != 0) {
        hs_warn("no thread-specific key left%s%s", "", "");
        return;
    }
    hs_signals_setup();
    hs_sud_setup();
    pthread_atfork(NULL, NULL, atfork_child);
    hs_on = 1;
    main_thread_begin();
    hs_signals_start();
}

__attribute__((destructor)) static void hs_fini(void)
{
    hs_thread_end(NULL);
}
