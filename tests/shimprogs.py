"""Small C programs for the cooperative shim's tests, compiled with cc into a test's
folder (the shim_lib fixture has skipped the test already where there is no compiler)."""
from __future__ import annotations

import os
import subprocess

import pytest

SOURCES = {
    # a sandbox's seccomp allowlist installed after the shim's start (the review's): three
    # threads through a barrier and a mutex, with or without (argv[1] "gettid") gettid and
    # openat allowed; the shim's threads joined with id -1 and the program hung
    "seccomp_threads": r"""
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#define ALLOW(n) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (n), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
static pthread_barrier_t b;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static long c;
static void *w(void *a)
{
    for (int i = 0; i < 300; i++) {
        pthread_barrier_wait(&b);
        pthread_mutex_lock(&m);
        c++;
        pthread_mutex_unlock(&m);
        if (i % 50 == 0) {
            struct timespec t = {0, 100000};
            nanosleep(&t, 0);
        }
    }
    return a;
}
int main(int argc, char **argv)
{
    int more = argc > 1 && strcmp(argv[1], "gettid") == 0;
    pthread_barrier_init(&b, 0, 3);
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        ALLOW(SYS_read), ALLOW(SYS_write), ALLOW(SYS_exit), ALLOW(SYS_exit_group), ALLOW(SYS_futex),
        ALLOW(SYS_rt_sigreturn), ALLOW(SYS_clock_nanosleep), ALLOW(SYS_nanosleep), ALLOW(SYS_brk),
        ALLOW(SYS_mmap), ALLOW(SYS_munmap), ALLOW(SYS_mprotect), ALLOW(SYS_clone), ALLOW(SYS_clone3),
        ALLOW(SYS_set_robust_list), ALLOW(SYS_rseq), ALLOW(SYS_rt_sigprocmask), ALLOW(SYS_madvise),
        ALLOW(SYS_newfstatat), ALLOW(SYS_fstat), ALLOW(SYS_getrandom),
        ALLOW(more ? SYS_gettid : SYS_read),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM)};
    struct sock_fprog p = {sizeof f / sizeof f[0], f};
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &p)) {
        perror("seccomp");
        return 1;
    }
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], 0, w, 0);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], 0);
    printf("c=%ld\n", c);
    return c != 900;
}
""",
    # a futex call through libc's syscall(), which the shim catches: in a process where the
    # shim is loaded but dormant (no job), passed on as it is
    "futexcall": r"""
#include <linux/futex.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
int main(void) { int w = 0; struct timespec t = {0, 1000};
                 long a = syscall(SYS_futex, &w, FUTEX_WAKE, 1, 0, 0, 0);
                 long b = syscall(SYS_futex, &w, FUTEX_WAIT, 0, &t, 0, 0);
                 printf("wake %ld wait %ld\n", a, b); return 0; }
""",
    # a thread that ends by the raw exit system call, holding its token: no TLS destructor
    # runs, so only the arbiter's per-thread liveness can give its token back
    "thread_exit": r"""
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
static void *body(void *a) { volatile long x = 0; for (long i = 0; i < 100000; i++) x += i;
                             syscall(SYS_exit, 0); return a; }
int main(void) { pthread_t t; pthread_create(&t, 0, body, 0); pthread_join(t, 0);
                 puts("joined"); return 0; }
""",
    # The same gone thread's token while two threads spin, passing the one token left back
    # and forth (each wait cut short by a rotation, none as long as the reclaim's period),
    # until stdin is closed.
    "thread_exit_busy": r"""
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
static volatile int stop;
static void *gone(void *a) { volatile long x = 0; for (long i = 0; i < 100000; i++) x += i;
                             syscall(SYS_exit, 0); return a; }
static void *busy(void *a) { volatile long n = 0; while (!stop) n++; return a; }
int main(void) { pthread_t t, b[2]; char c;
                 pthread_create(&t, 0, gone, 0); pthread_join(t, 0);
                 for (int i = 0; i < 2; i++) pthread_create(&b[i], 0, busy, 0);
                 while (read(0, &c, 1) > 0) {}
                 stop = 1;
                 for (int i = 0; i < 2; i++) pthread_join(b[i], 0);
                 puts("done"); return 0; }
""",
    # Two threads taking TURNS turns each by sched_yield (as a runtime's spin-with-yield
    # waits for its partner): prints the yields the waiting side made per turn.
    "yield_turns": r"""
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#define TURNS 2000
static volatile int turn;
static long yields[2];
static void *body(void *a) {
    int me = (int)(long)a;
    for (int i = 0; i < TURNS; i++) {
        while (turn != me)
            yields[me]++, sched_yield();
        turn = 1 - me;
    }
    return a;
}
int main(void) { pthread_t t[2];
                 for (long i = 0; i < 2; i++) pthread_create(&t[i], 0, body, (void *)i);
                 for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
                 printf("%.1f\n", (yields[0] + yields[1]) / (2.0 * TURNS)); return 0; }
""",
    # Who takes a lock that is let go while a thread sleeps on it, ROUNDS times: thread 0
    # holds it until thread 1 sleeps on it (the lock is marked as having sleepers: -1 for
    # an OpenMP lock, argv[1] "omp"; 2 for a glibc mutex, "mutex"), lets it go, and watches
    # it for 50 ms while calling into the shim (a read lock's: a computing holder, which
    # nobody asks to rotate and which gives no turn). "stolen" counts the rounds in which
    # thread 1 took it meanwhile, without the only token, which thread 0 holds.
    "omp_lock_handover": r"""
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define ROUNDS 10
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + t.tv_nsec * 1e-9; }
static omp_lock_t l;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static int omp;
static void take(void) { if (omp) omp_set_lock(&l); else pthread_mutex_lock(&m); }
static void give(void) { if (omp) omp_unset_lock(&l); else pthread_mutex_unlock(&m); }
int main(int argc, char **argv) {
    omp = strcmp(argv[1], "omp") == 0; omp_init_lock(&l);
    volatile int *word = omp ? (volatile int *)&l : &m.__data.__lock;
    int sleepers = omp ? -1 : 2;
    pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
    volatile int round = -1, done = -1; int stolen = 0;
    #pragma omp parallel num_threads(2)
    { int me = omp_get_thread_num();
      for (int r = 0; r < ROUNDS; r++) {
          if (me == 1) { while (round != r) usleep(100);
                         take(); give(); done = r; continue; }
          take(); round = r;
          while (*word != sleepers) usleep(100);
          give();
          double end = now() + 0.05;
          while (*word == 0 && now() < end) { pthread_rwlock_rdlock(&rw); pthread_rwlock_unlock(&rw); }
          stolen += *word != 0;
          while (done != r) usleep(100); } }
    printf("stolen=%d\n", stolen);
    return 0;
}
""",
    # a library whose constructor locks and unlocks a mutex: linked by "ctor_main", it is
    # initialised before the shim, whose constructor has not run yet
    "ctor_lib": r"""
#include <pthread.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static int ran;
__attribute__((constructor)) static void early(void) { pthread_mutex_lock(&m); ran = 1;
                                                       pthread_mutex_unlock(&m); }
int ctor_ran(void) { return ran; }
""",
    "ctor_main": r"""
#include <stdio.h>
int ctor_ran(void);
int main(void) { puts(ctor_ran() ? "ok" : "FAILED"); return 0; }
""",
    # A condition variable's waiter, woken while the signaller keeps the only token: glibc
    # takes the mutex back for it at once. The signaller watches the mutex for 50 ms while
    # calling into the shim (a read lock's: no rotation) and says whether it was still held
    # at the end ("held_at_end=1": by the waiter, without a token). argv[1]: the mutex's
    # type for pthread_mutexattr_settype, or -1 for the default attribute.
    "cond_handover": r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static pthread_mutex_t m;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static volatile int flag, waiting, got;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + t.tv_nsec * 1e-9; }
static void *waiter(void *a) { pthread_mutex_lock(&m); waiting = 1;
                               while (!flag) pthread_cond_wait(&c, &m);
                               got = 1; pthread_mutex_unlock(&m); return a; }
int main(int argc, char **argv) {
    pthread_mutexattr_t at; pthread_mutexattr_init(&at);
    if (atoi(argv[1]) >= 0) pthread_mutexattr_settype(&at, atoi(argv[1]));
    pthread_mutex_init(&m, &at);
    pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
    pthread_t t; pthread_create(&t, 0, waiter, 0);
    for (;;) { pthread_mutex_lock(&m); int w = waiting; pthread_mutex_unlock(&m);
               if (w) break; usleep(100); }
    pthread_mutex_lock(&m); flag = 1; pthread_cond_signal(&c); pthread_mutex_unlock(&m);
    double end = now() + 0.05;
    while (now() < end) { pthread_rwlock_rdlock(&rw); pthread_rwlock_unlock(&rw); }
    int held = __atomic_load_n(&m.__data.__lock, __ATOMIC_RELAXED) != 0;
    pthread_join(t, 0);
    printf("held_at_end=%d got=%d\n", held, got); return 0;
}
""",
    # THREADS threads (argv[1]), ROUNDS each (argv[2]): a mutex taken and given back inside
    # a spinlock held around ITERS (argv[3], 300 000 by default: ~0.5 ms) of work. The
    # spinlock is taken by trylock and every failed try counted (busy): on one token a try
    # fails only where the holder was rotated holding it, and the thread given the token
    # spins for it ("ok" when the count adds up).
    "spin_outer": r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static pthread_spinlock_t s;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static volatile double sink;
static long count, rounds, iters, busy;
static void *body(void *a) {
    for (long r = 0; r < rounds; r++) {
        while (pthread_spin_trylock(&s) != 0) __atomic_add_fetch(&busy, 1, __ATOMIC_RELAXED);
        pthread_mutex_lock(&m); for (long k = 0; k < iters; k++) sink += k; count++;
        pthread_mutex_unlock(&m);
        pthread_spin_unlock(&s); }
    return a;
}
int main(int argc, char **argv) {
    int n = atoi(argv[1]); rounds = atol(argv[2]); iters = argc > 3 ? atol(argv[3]) : 300000;
    pthread_spin_init(&s, 0);
    pthread_t t[16];
    for (long i = 0; i < n; i++) pthread_create(&t[i], 0, body, 0);
    for (int i = 0; i < n; i++) pthread_join(t[i], 0);
    printf("%s busy=%ld\n", count == n * rounds ? "ok" : "FAILED", busy); return 0;
}
""",    # A spinlock held for ITERS (argv[1]) of work by a second thread while the main thread
    # waits for it in pthread_spin_lock: "spinning" once it is about to, then the time
    # (CLOCK_MONOTONIC) the holder gave it back.
    "spin_hold": r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static pthread_spinlock_t s;
static volatile int held;
static volatile double sink;
static long iters;
static double released;
static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void *holder(void *a) {
    pthread_spin_lock(&s); held = 1;
    for (long k = 0; k < iters; k++) sink += k;
    released = now(); pthread_spin_unlock(&s); return a;
}
int main(int argc, char **argv) {
    iters = atol(argv[1]); pthread_spin_init(&s, 0);
    pthread_t t; pthread_create(&t, 0, holder, 0);
    while (!held) ;
    printf("spinning\n"); fflush(stdout);
    pthread_spin_lock(&s); pthread_spin_unlock(&s);
    pthread_join(t, 0);
    printf("released %.6f\n", released); return 0;
}
""",
    # One thread holds a spinlock for HOLD_MS (argv[1]) of work while WAITERS threads
    # (argv[2]) wait for it in pthread_spin_lock; "ok" once every waiter has had it.
    "spin_crowd": r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static pthread_spinlock_t s;
static volatile int held;
static double hold_s;
static long got;
static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void *holder(void *a) {
    pthread_spin_lock(&s); held = 1;
    double t0 = now(); volatile double x = 0;
    while (now() - t0 < hold_s) for (int k = 0; k < 1000; k++) x += k;
    pthread_spin_unlock(&s); return a;
}
static void *waiter(void *a) {
    while (!held) ;
    pthread_spin_lock(&s); got++; pthread_spin_unlock(&s); return a;
}
int main(int argc, char **argv) {
    hold_s = atof(argv[1]) / 1000; int m = atoi(argv[2]); pthread_spin_init(&s, 0);
    pthread_t h, w[64]; pthread_create(&h, 0, holder, 0);
    for (int i = 0; i < m; i++) pthread_create(&w[i], 0, waiter, 0);
    pthread_join(h, 0); for (int i = 0; i < m; i++) pthread_join(w[i], 0);
    puts(got == m ? "ok" : "FAILED"); return got != m;
}
""",
    # the time (CLOCK_MONOTONIC) its main function began: under the shim, once it held a token
    "stamp": r"""
#include <stdio.h>
#include <time.h>
int main(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    printf("started %.6f\n", t.tv_sec + t.tv_nsec * 1e-9); return 0;
}
""",
    # glibc's mutexes of argv[1]'s kind ("normal": the default attribute, "settype-normal":
    # the same type given to pthread_mutexattr_settype, "recursive", "errorcheck",
    # "adaptive", "pshared") under many sleepers: THREADS threads (argv[2]) take it ROUNDS times each
    # (argv[3]; the recursive one twice), then half of them produce ROUNDS items each into
    # a one-slot box guarded by it and two condition variables, the other half take them
    # (with a timed wait, far off); an error-checking one locked again by its owner answers
    # EDEADLK. A wake-up lost hangs it; "ok" when every count adds up.
    "mutex_many": r"""
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static pthread_mutex_t m;
static pthread_cond_t full = PTHREAD_COND_INITIALIZER, empty = PTHREAD_COND_INITIALIZER;
static long rounds, total, box, taken, sum, recursive;
static int threads;
static void *body(void *a) {
    long me = (long)a; volatile double x = 0;
    for (long r = 0; r < rounds; r++) {
        pthread_mutex_lock(&m); if (recursive) pthread_mutex_lock(&m);
        for (int i = 0; i < 100; i++) x = x * 0.5 + 1;
        total++;
        if (recursive) pthread_mutex_unlock(&m);
        pthread_mutex_unlock(&m); }
    long items = rounds * (threads / 2);
    if (me % 2 == 0) {
        for (long r = 1; r <= rounds; r++) {
            pthread_mutex_lock(&m);
            while (box) pthread_cond_wait(&empty, &m);
            box = r; pthread_cond_signal(&full); pthread_mutex_unlock(&m); }
    } else {
        struct timespec far; clock_gettime(CLOCK_REALTIME, &far); far.tv_sec += 3600;
        for (;;) {
            pthread_mutex_lock(&m);
            while (!box && taken < items) pthread_cond_timedwait(&full, &m, &far);
            if (taken == items) { pthread_cond_broadcast(&full); pthread_mutex_unlock(&m); break; }
            sum += box; box = 0; taken++;
            pthread_cond_signal(&empty); pthread_mutex_unlock(&m); } }
    return a;
}
int main(int argc, char **argv) {
    pthread_mutexattr_t at; pthread_mutexattr_init(&at);
    const char *kind = argv[1];
    if (!strcmp(kind, "recursive")) { pthread_mutexattr_settype(&at, PTHREAD_MUTEX_RECURSIVE); recursive = 1; }
    if (!strcmp(kind, "settype-normal")) pthread_mutexattr_settype(&at, PTHREAD_MUTEX_NORMAL);
    if (!strcmp(kind, "errorcheck")) pthread_mutexattr_settype(&at, PTHREAD_MUTEX_ERRORCHECK);
    if (!strcmp(kind, "adaptive")) pthread_mutexattr_settype(&at, PTHREAD_MUTEX_ADAPTIVE_NP);
    if (!strcmp(kind, "pshared")) pthread_mutexattr_setpshared(&at, PTHREAD_PROCESS_SHARED);
    pthread_mutex_init(&m, &at);
    threads = atoi(argv[2]); rounds = atol(argv[3]);
    pthread_t t[64];
    for (long i = 0; i < threads; i++) pthread_create(&t[i], 0, body, (void *)i);
    for (int i = 0; i < threads; i++) pthread_join(t[i], 0);
    long items = rounds * (threads / 2);
    int ok = total == threads * rounds && taken == items && sum == (threads / 2) * rounds * (rounds + 1) / 2;
    if (!strcmp(kind, "errorcheck")) {
        pthread_mutex_lock(&m); ok = ok && pthread_mutex_lock(&m) == EDEADLK; pthread_mutex_unlock(&m); }
    puts(ok ? "ok" : "FAILED");
    return !ok;
}
""",
    # THREADS threads, ROUNDS each, of a plain and a nested OpenMP lock taken around a few
    # iterations: many sleepers at once, so a wake-up lost by the shim's lock wait hangs it
    "omp_lock_many": r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int threads = atoi(argv[1]); long rounds = atol(argv[2]), total = 0, nested = 0;
    omp_lock_t l; omp_nest_lock_t n; omp_init_lock(&l); omp_init_nest_lock(&n);
    volatile double x = 0;
    #pragma omp parallel num_threads(threads)
    for (long r = 0; r < rounds; r++) {
        omp_set_lock(&l); for (int i = 0; i < 200; i++) x = x * 0.5 + 1; total++; omp_unset_lock(&l);
        omp_set_nest_lock(&n); omp_set_nest_lock(&n); nested++;
        omp_unset_nest_lock(&n); omp_unset_nest_lock(&n);
    }
    int ok = total == threads * rounds && nested == threads * rounds;
    puts(ok ? "ok" : "FAILED");
    return !ok;
}
""",
    # argv[1] a file of 4 bytes shared by two processes; "wait": spin (calling nothing)
    # until the other has set it ("deaf": with every signal blocked by the raw system
    # call, past the shim's wrappers); "set": set it
    "spin_flag": r"""
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int fd = open(argv[1], O_RDWR);
    volatile int *flag = mmap(0, 4, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (strcmp(argv[2], "set") == 0) { *flag = 1; puts("set"); return 0; }
    if (strcmp(argv[2], "deaf") == 0) { unsigned long all = ~0UL; syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, 0, 8); }
    printf("spinning\n"); fflush(stdout);
    while (*flag == 0) { }
    puts("released"); return 0;
}
""",
    # "read": open a FIFO for reading (blocks in open(), which the shim does not see, until
    # a writer opens it) and read it; "write": open it and write one line
    "fifo": r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (strcmp(argv[2], "write") == 0) { int fd = open(argv[1], O_WRONLY); write(fd, "x\n", 2);
                                         close(fd); return 0; }
    printf("opening\n"); fflush(stdout);
    int fd = open(argv[1], O_RDONLY); char c[2]; read(fd, c, 2); printf("got %c\n", c[0]);
    return 0;
}
""",
    # an OpenMP barrier loop: argv[1] steps of argv[2] µs of computing per thread
    "omp_bsp": r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    int steps = atoi(argv[1]); double us = atof(argv[2]); long done = 0;
    printf("start\n"); fflush(stdout);
    double t0 = now();
    #pragma omp parallel reduction(+:done)
    { for (int s = 0; s < steps; s++) { double e = now() + us * 1e-6; while (now() < e) { }
                                         done++;
        #pragma omp barrier
      } }
    printf("%ld steps by %d threads in %.6f s\n", done, omp_get_max_threads(), now() - t0);
    return done == (long)steps * omp_get_max_threads() ? 0 : 1;
}
""",
    # OpenMP lock contention, made certain, ROUNDS times: thread 0 takes the lock before
    # a barrier and lets it go 2 ms after it, so thread 1's omp_set_lock waits ("contend";
    # "alone": it does not ask). The barriers are pthread's, which the shim serves without
    # a trap, so what is trapped is libgomp's own: the lock's waits and wakes, and the end
    # of the parallel region. As a shared library (-DAS_LIBRARY) its run() is what a
    # program that dlopens it privately calls (RTLD_LOCAL, as numba loads libgomp).
    "omp_lock_wait": r"""
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#define ROUNDS 10
int run(int contend) {
    omp_lock_t l; omp_init_lock(&l); int got = 0;
    pthread_barrier_t b; pthread_barrier_init(&b, 0, 2);
    #pragma omp parallel num_threads(2)
    { int me = omp_get_thread_num();
      for (int r = 0; r < ROUNDS; r++) {
          if (me == 0) omp_set_lock(&l);
          pthread_barrier_wait(&b);
          if (me == 0) { usleep(2000); omp_unset_lock(&l); }
          else if (contend) { omp_set_lock(&l); got++; omp_unset_lock(&l); }
          pthread_barrier_wait(&b); } }
    omp_destroy_lock(&l);
    return got == (contend ? ROUNDS : 0);
}
#ifndef AS_LIBRARY
int main(int argc, char **argv) { int ok = run(strcmp(argv[1], "contend") == 0);
                                  puts(ok ? "ok" : "FAILED"); return !ok; }
#endif
""",
    # argv[1] rounds of a futex hand-off through syscall(): the main thread waits for the
    # word to reach the round's number, which the other thread sets a few µs after it saw
    # the round begin, then wakes it; with argv[2] "handler", a SIGUSR1 handler that
    # interrupts waits (no SA_RESTART) is installed first, never used
    "futex_handoff": r"""
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
static void on_usr1(int sig) { (void)sig; }
static volatile int go, word;
static long rounds;
static void *setter(void *a) {
    for (int r = 1; r <= rounds; r++) {
        while (go != r) { }
        for (volatile int i = 0; i < 2000; i++) { }
        __atomic_store_n(&word, r, __ATOMIC_RELEASE);
        syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0); }
    return a;
}
int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[2], "handler") == 0) {
        struct sigaction sa; memset(&sa, 0, sizeof sa); sa.sa_handler = on_usr1;
        sigaction(SIGUSR1, &sa, 0); }
    rounds = atol(argv[1]); pthread_t t; pthread_create(&t, 0, setter, 0);
    for (int r = 1; r <= rounds; r++) {
        go = r;
        while (__atomic_load_n(&word, __ATOMIC_ACQUIRE) != r)
            syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, r - 1, 0, 0, 0); }
    pthread_join(t, 0); puts("ok"); return 0;
}
""",
    # a futex wait through syscall() on a page that cannot be read, while another thread
    # of the job runs: the kernel's answer, EFAULT, as without the shim
    "futex_fault": r"""
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
static volatile int stop;
static void *busy(void *a) { while (!stop) { } return a; }
int main(void) {
    pthread_t t; pthread_create(&t, 0, busy, 0);
    int *word = mmap(0, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    long r = syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 0, 0, 0, 0);
    int e = errno; stop = 1; pthread_join(t, 0);
    printf("%ld %s\n", r, r == -1 ? strerror(e) : "-"); return 0;
}
""",
    # the main thread starts a thread that only sets a flag, then, with argv[1] "spin",
    # spins (calling nothing) until the flag is set; with "locks", takes and gives back an
    # uncontended rwlock (its lock enters the shim, its unlock does not) for argv[2] ms
    # (clock_gettime is not the shim's) and says whether the thread had run meanwhile ("ran") or not ("waited"); "mutex": the same with a
    # mutex, whose unlock is a scheduling point; with "locks_spin", the same as "locks",
    # then spins until the flag is set and says "ok" if the thread had waited; with "pair", starts a second
    # thread first that spins until the flag is set while the main thread takes and gives
    # back the rwlock until then; with "deaf", blocks every signal by the raw system call
    # first, spins until the flag is set, then unblocks them; with "many", starts 3 threads
    # that print their voluntary context switches once they run, while the main thread
    # takes and gives back the rwlock for argv[2] ms
    "sibling_waits": r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static volatile int flag;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static void *setter(void *a) { flag = 1; return a; }
static void *spinner(void *a) { while (!flag) { } return a; }
static long switches[3];
static void *counter(void *a) { struct rusage u; getrusage(RUSAGE_THREAD, &u);
                                switches[(long)a] = u.ru_nvcsw; return a; }
static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                             return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
int main(int argc, char **argv) {
    pthread_t t, u, v[3];
    if (strcmp(argv[1], "many") == 0) {
        for (long i = 0; i < 3; i++) pthread_create(&v[i], 0, counter, (void *)i);
        double end = now_ms() + atof(argv[2]);
        while (now_ms() < end) { pthread_rwlock_rdlock(&rw); pthread_rwlock_unlock(&rw); }
        for (int i = 0; i < 3; i++) pthread_join(v[i], 0);
        printf("%ld %ld %ld\n", switches[0], switches[1], switches[2]); return 0; }
    if (strncmp(argv[1], "asleep", 6) == 0) {  /* in a call the shim does not see, token kept */
        int then_spin = strcmp(argv[1], "asleep_spin") == 0;  /* and then spin for a sibling */
        for (long i = 0; i < 3; i++) pthread_create(&v[i], 0, then_spin ? setter : counter, (void *)i);
        sigset_t never; sigemptyset(&never); sigaddset(&never, SIGUSR2);
        pthread_sigmask(SIG_BLOCK, &never, 0);
        long ms = atol(argv[2]);
        struct timespec nap = {ms / 1000, ms % 1000 * 1000000L};
        syscall(SYS_rt_sigtimedwait, &never, 0, &nap, 8);  /* not libc's wrapped one */
        while (then_spin && !flag) { }
        for (int i = 0; i < 3; i++) pthread_join(v[i], 0);
        if (then_spin) { puts("ok"); return 0; }
        printf("%ld %ld %ld\n", switches[0], switches[1], switches[2]); return 0; }
    if (strcmp(argv[1], "deaf") == 0) {
        unsigned long all = ~0UL, none = 0;
        syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, 0, 8);
        pthread_create(&t, 0, setter, 0);
        while (!flag) { }
        syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, 0, 8);
        pthread_join(t, 0); puts("ok"); return 0; }
    if (strcmp(argv[1], "pair") == 0)
        pthread_create(&u, 0, spinner, 0);
    pthread_create(&t, 0, setter, 0);
    if (strcmp(argv[1], "pair") == 0) {
        while (!flag) { pthread_rwlock_rdlock(&rw); pthread_rwlock_unlock(&rw); }
        pthread_join(t, 0); pthread_join(u, 0); puts("ok"); return 0; }
    if (strcmp(argv[1], "spin") == 0) {
        while (!flag) { }
        pthread_join(t, 0); puts("ok"); return 0; }
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    int mutex = strcmp(argv[1], "mutex") == 0;
    double end = now_ms() + atof(argv[2]);
    volatile double x = 0;
    while (now_ms() < end) {
        if (mutex) pthread_mutex_lock(&m); else pthread_rwlock_rdlock(&rw);
        for (int i = 0; i < 1000; i++) x = x * 0.5 + 1;
        if (mutex) pthread_mutex_unlock(&m); else pthread_rwlock_unlock(&rw); }
    int ran = flag;
    if (strcmp(argv[1], "locks_spin") == 0) {
        while (!flag) { }
        pthread_join(t, 0); puts(ran ? "ran" : "ok"); return 0; }
    pthread_join(t, 0); puts(ran ? "ran" : "waited"); return 0;
}
""",
    # Two processes of one job (a script whose forked workers each run a BLAS pool): the
    # child's main thread keeps its token, calling an uncontended mutex (it enters the shim:
    # no early look takes it for a spinner). The parent's second thread sleeps on a
    # condition variable until the main thread posts it work, as OpenBLAS's caller posts its
    # pool thread's; then it counts, calling nothing, while the main thread spins, calling
    # nothing. The main thread prints "gang" once it has seen the count move while it ran
    # itself (both held tokens at once), "apart" if not within argv[1] s.
    "proc_gang": r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static volatile long count;
static volatile int *stop;
static int posted;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;
static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                             return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static void *counter(void *a) {
    pthread_mutex_lock(&m);
    while (!posted) pthread_cond_wait(&work, &m);
    pthread_mutex_unlock(&m);
    while (!stop[0]) count++;
    return a;
}
int main(int argc, char **argv) {
    stop = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int ready[2];
    if (argc != 2 || stop == MAP_FAILED || pipe(ready)) return 2;
    pid_t child = fork();
    if (child == 0) {
        pthread_mutex_t mine = PTHREAD_MUTEX_INITIALIZER;
        if (write(ready[1], "r", 1) != 1) _exit(2);
        while (!stop[0]) { pthread_mutex_lock(&mine); pthread_mutex_unlock(&mine); }
        _exit(0);
    }
    char c;
    if (read(ready[0], &c, 1) != 1) return 2;
    pthread_t t;
    pthread_create(&t, 0, counter, 0);
    struct timespec nap = {0, 20000000};
    nanosleep(&nap, 0);  /* the thread sleeps on the variable by now */
    pthread_mutex_lock(&m);
    posted = 1;
    pthread_cond_signal(&work);
    pthread_mutex_unlock(&m);
    double end = now_us() + atof(argv[1]) * 1e6;
    int seen = 0;
    while (!seen && now_us() < end) {
        double t0 = now_us();
        long c0 = count;
        while (now_us() - t0 < 20) { }
        seen = count != c0 && now_us() - t0 < 40;  /* it counted while this one ran */
    }
    stop[0] = 1;
    pthread_join(t, 0);
    int status;
    waitpid(child, &status, 0);
    puts(seen ? "gang" : "apart");
    return 0;
}
""",
    # OpenBLAS's pattern: a pool thread sleeps on a condition variable between jobs, which
    # the main thread posts after some work of its own (an eighth of a job's) and then
    # waits for by spinning on a flag (calling nothing). ROUNDS jobs (argv[1]); the pool
    # thread counts the returns of its wait that found no job (spurious wake-ups). "ok"
    # when every job ran. argv[2] "extra": a third thread sleeps on another condition
    # variable meanwhile; "pshared": the mutex and the variable are process-shared.
    "cond_pool": r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static int job, done_count, rounds;
static long spurious;
static volatile double sink;
static void work(int n) { double x = 0; for (int i = 0; i < n; i++) x = x * 0.9999999 + 1.0;
                          sink = x; }
static void *pool(void *a) {
    for (int r = 0; r < rounds; r++) {
        pthread_mutex_lock(&m);
        while (!job) { pthread_cond_wait(&wake, &m); if (!job) spurious++; }
        job = 0; pthread_mutex_unlock(&m);
        work(40000);
        __atomic_store_n(&done_count, r + 1, __ATOMIC_RELEASE);
    }
    return a;
}
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static int over, idling;
static void *idle(void *a) { __atomic_store_n(&idling, 1, __ATOMIC_RELEASE);
                             pthread_mutex_lock(&m); while (!over) pthread_cond_wait(&never, &m);
                             pthread_mutex_unlock(&m); return a; }
int main(int argc, char **argv) {
    rounds = atoi(argv[1]);
    pthread_t t, extra;
    if (argc > 2 && argv[2][0] == 'p') {  /* "pshared": both process-shared */
        pthread_mutexattr_t ma; pthread_mutexattr_init(&ma);
        pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED); pthread_mutex_init(&m, &ma);
        pthread_condattr_t ca; pthread_condattr_init(&ca);
        pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED); pthread_cond_init(&wake, &ca);
    } else if (argc > 2) {  /* running (so counted by the shim) before the pool thread starts */
        pthread_create(&extra, 0, idle, 0);
        while (!__atomic_load_n(&idling, __ATOMIC_ACQUIRE)) { }
    }
    pthread_create(&t, 0, pool, 0);
    for (int r = 0; r < rounds; r++) {
        work(5000);
        pthread_mutex_lock(&m); job = 1; pthread_cond_signal(&wake); pthread_mutex_unlock(&m);
        while (__atomic_load_n(&done_count, __ATOMIC_ACQUIRE) != r + 1) { }
    }
    pthread_join(t, 0);
    if (argc > 2 && argv[2][0] != 'p') { pthread_mutex_lock(&m); over = 1; pthread_cond_signal(&never);
                    pthread_mutex_unlock(&m); pthread_join(extra, 0); }
    printf("ok spurious=%ld\n", spurious); return 0;
}
""",
    # A waiter on a condition variable while the main thread computes (and so runs) for
    # 0.3 s before it signals; the waiter works ~25 µs after each return of its wait.
    # argv[1] "gap": it counts them ("returns=N"); "cancel": the main thread cancels it
    # after 50 ms and, still computing, waits up to 5 s for its cleanup handler, which
    # checks that it holds the mutex ("ok" or "FAILED").
    "cond_waiter": r"""
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int ready, cleaned, held;
static long returns;
static volatile double sink;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + t.tv_nsec * 1e-9; }
static void busy(double s) { double end = now() + s, x = 0; while (now() < end) x += 1.0; sink = x; }
static void cleanup(void *a) { held = pthread_mutex_trylock(&m) != 0; pthread_mutex_unlock(&m);
                               __atomic_store_n(&cleaned, 1, __ATOMIC_RELEASE); (void)a; }
static void *waiter(void *a) {
    pthread_cleanup_push(cleanup, 0);
    pthread_mutex_lock(&m);
    while (!ready) { pthread_cond_wait(&c, &m); returns++; busy(25e-6); }
    pthread_mutex_unlock(&m);
    pthread_cleanup_pop(0);
    return a;
}
int main(int argc, char **argv) {
    pthread_t t; pthread_create(&t, 0, waiter, 0);
    if (strcmp(argv[1], "gap") == 0) {
        busy(0.3);
        pthread_mutex_lock(&m); ready = 1; pthread_cond_signal(&c); pthread_mutex_unlock(&m);
        pthread_join(t, 0); printf("returns=%ld\n", returns); return 0;
    }
    busy(0.05);
    pthread_cancel(t);
    double end = now() + 5;
    while (!__atomic_load_n(&cleaned, __ATOMIC_ACQUIRE) && now() < end) { }
    int ok = __atomic_load_n(&cleaned, __ATOMIC_ACQUIRE) && held;
    pthread_join(t, 0); puts(ok ? "ok" : "FAILED"); return !ok;
}
""",
    # dlopen argv[1] with RTLD_LOCAL and call its run(argv[2] == "contend")
    # Two threads, ROUNDS rounds each: some work, then as much again under one mutex
    # (argv[1]); prints "ok" when the shared total is right.
    "mutex_loop": r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static long rounds, total;
static volatile double sink;
static void work(void) { double x = 0; for (int i = 0; i < 300; i++) x = x * 0.9999999 + 1.0;
                         sink = x; }
static void *body(void *a) {
    for (long r = 0; r < rounds; r++) {
        work();
        pthread_mutex_lock(&m); work(); total++; pthread_mutex_unlock(&m);
    }
    return a;
}
int main(int argc, char **argv) {
    rounds = atol(argv[1]);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, body, 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
    puts(total == 2 * rounds ? "ok" : "FAILED");
    return total != 2 * rounds;
}
""",
    "dlopen_run": r"""
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 3; }
    int (*run)(int) = (int (*)(int))dlsym(h, "run");
    int ok = run(strcmp(argv[2], "contend") == 0);
    puts(ok ? "ok" : "FAILED"); return !ok;
}
""",
    # stdio on pipes, the calls the shim catches (wrap_stdio.c), N bytes all told, their sum
    # printed ("read", "lines", "records": on stdout; "write", "fmt", "put": on stderr),
    # "ready" on stderr first. "read" reads stdin with fread only, "lines" with fgets,
    # getline, getc and getchar, "records" with getdelim on NUL; "write" writes a known sequence with fwrite only, "fmt" with printf and
    # fprintf, "put" with fputs, putc, fputc, putchar and puts (a newline every ~60 bytes).
    "stdio": r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static unsigned long add(unsigned long sum, const char *b, long n)
{ for (long i = 0; i < n; i++) sum += (unsigned char)b[i]; return sum; }
#define LINE "0123456789abcdefghij\n"
static long lines;
static char record[8193];  /* mode lrecords: a line of two pages and a byte */
static void *lines_out(void *unused)  /* mode threads: one of three writers of stdout */
{
    for (long i = 0; i < lines; i++) {
        fwrite(LINE, 1, sizeof LINE - 1, stdout);
        if (i % 1000 == 0) fflush(stdout);  /* a short write: a pipe page left part full */
    }
    return unused;
}
static int locked;  /* mode flrecords: each record written under the program's flockfile */
static void *records_out(void *unused)  /* mode lrecords: one of three writers of stdout */
{
    for (long i = 0; i < lines; i++) {
        if (locked) flockfile(stdout);
        fwrite(record, 1, sizeof record, stdout);
        if (locked) funlockfile(stdout);
    }
    return unused;
}
int main(int argc, char **argv) {
    long n = atol(argv[2]), done = 0, k = 0; unsigned long sum = 0;
    const char *mode = argv[1];
    if (!strcmp(mode, "threads") || !strcmp(mode, "lrecords") || !strcmp(mode, "flrecords")) {
        /* lrecords: each fwrite on a line-buffered stream writes two pages, then its
           newline alone, a page left part full */
        int recs = mode[0] != 't';
        locked = mode[0] == 'f';
        const char *text = recs ? record : LINE;
        long size = recs ? (long)sizeof record : (long)(sizeof LINE - 1);
        memset(record, 'r', sizeof record - 1);
        record[sizeof record - 1] = '\n';
        if (recs) setvbuf(stdout, NULL, _IOLBF, 4096);
        pthread_t t[3];
        lines = n / 3 / size;
        fputs("ready\n", stderr);
        for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, recs ? records_out : lines_out, NULL);
        for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
        fflush(stdout);
        fprintf(stderr, "wrote %ld sum %lu\n", 3 * lines * size, 3 * lines * add(0, text, size));
        return 0;
    }
    char buf[20000], *line = NULL; size_t cap = 0;
    for (size_t i = 0; i < sizeof buf - 1; i++) buf[i] = (char)('a' + i % 26);
    buf[sizeof buf - 1] = 0;
    fputs("ready\n", stderr);
    if (!strcmp(mode, "read") || !strcmp(mode, "lines") || !strcmp(mode, "records")) {
        while (done < n) {
            long got = 0; int c; const char *from = buf;
            switch (!strcmp(mode, "read") ? 4 : !strcmp(mode, "records") ? 5 : k++ % 4) {
            case 5: got = getdelim(&line, &cap, 0, stdin); if (got < 0) got = 0; from = line; break;
            case 0: if (fgets(buf, 100, stdin)) got = (long)strlen(buf); break;
            case 1: got = getline(&line, &cap, stdin); if (got < 0) got = 0; from = line; break;
            case 2: if ((c = getc(stdin)) != EOF) { got = 1; buf[0] = (char)c; } break;
            case 3: if ((c = getchar()) != EOF) { got = 1; buf[0] = (char)c; } break;
            default: got = (long)fread(buf, 1, 9000, stdin); break;
            }
            if (got == 0 && feof(stdin)) break;
            sum = add(sum, from, got);
            done += got;
        }
        printf("read %ld sum %lu\n", done, sum);
    } else {
        while (done < n) {
            long left = n - done, put = 0;
            if (!strcmp(mode, "write")) {
                put = left < 17000 ? left : 17000; fwrite(buf, 1, (size_t)put, stdout);
                sum = add(sum, buf, put);
            } else if (!strcmp(mode, "dfmt") || !strcmp(mode, "dlong")) {
                long most = mode[1] == 'l' ? 19000 : 300;  /* dlong: past any guess */
                put = left < most ? left : most; dprintf(1, "%.*s", (int)put, buf);
                sum = add(sum, buf, put);
            } else if (!strcmp(mode, "sfmt") || !strcmp(mode, "lsfmt")) {
                /* long strings through %s: 8 KB lines, past the guessed length */
                if (k++ == 0 && mode[0] == 'l') setvbuf(stdout, NULL, _IOLBF, 4096);
                put = left < 8001 ? left : 8001;
                char c = buf[put - 1]; buf[put - 1] = 0;
                printf("%s\n", buf);
                buf[put - 1] = c;
                sum = add(sum, buf, put - 1) + '\n';
            } else if (!strcmp(mode, "lfmt")) {  /* line-buffered: each newline flushes */
                if (k++ == 0) setvbuf(stdout, NULL, _IOLBF, 0);
                put = left < 300 ? left : 300;
                printf("%.*s\n", (int)put - 1, buf);
                sum = add(sum, buf, put - 1) + '\n';
            } else if (!strcmp(mode, "fmt")) {
                put = left < 300 ? left : 300;
                if (k++ % 2) printf("%.*s", (int)put, buf); else fprintf(stdout, "%.*s", (int)put, buf);
                sum = add(sum, buf, put);
            } else switch (k++ % 6) {
            case 0: { long m = left < 57 ? left : 57; char c = buf[m]; buf[m] = 0;
                      fputs(buf, stdout); buf[m] = c; put = m; sum = add(sum, buf, m); } break;
            case 1: putc('\n', stdout); put = 1; sum += '\n'; break;
            case 2: fputc('x', stdout); put = 1; sum += 'x'; break;
            case 3: putchar('y'); put = 1; sum += 'y'; break;
            case 4: if (left >= 4) { puts("zzz"); put = 4; sum += 3 * 'z' + '\n'; } break;
            default: putc('w', stdout); put = 1; sum += 'w'; break;
            }
            done += put;
        }
        fflush(stdout);
        fprintf(stderr, "wrote %ld sum %lu\n", done, sum);
    }
    return 0;
}
""",
    # A child that computes holding a token (it printed "busy"), killed and reaped by its
    # parent, which then prints "reaped PID" and waits for its stdin to close.
    "reap_busy": r"""
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void) {
    int ready[2];
    if (pipe(ready)) return 2;
    pid_t child = fork();
    if (child == 0) {
        if (write(ready[1], "b", 1) != 1) _exit(2);
        for (volatile long i = 0;; i++) { }
    }
    char c;
    if (read(ready[0], &c, 1) != 1) return 2;
    kill(child, SIGKILL);
    int st;
    if (waitpid(child, &st, 0) != child || !WIFSIGNALED(st)) return 3;
    printf("reaped %d\n", (int)child);
    fflush(stdout);
    while (read(0, &c, 1) > 0) { }
    return 0;
}
""",
}


def build(name: str, folder, *flags: str) -> str:
    """The program ``name`` compiled into ``folder``; skips the test when the compiler
    cannot make it (e.g. no static libc for -static, no OpenMP)."""
    src = os.path.join(folder, f"{name}.c")
    exe = os.path.join(folder, name + ("-" + "-".join(f.strip("-") for f in flags) if flags else ""))
    with open(src, "w") as fh:
        fh.write(SOURCES[name])
    openmp = ("-fopenmp",) if name.startswith("omp") else ()
    p = subprocess.run(["cc", "-O1", *openmp, *flags, src, "-o", exe, "-lpthread"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cc could not build {name} {' '.join(flags)}: {p.stderr.strip()[:200]}")
    return exe
