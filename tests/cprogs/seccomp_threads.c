/* a sandbox's seccomp allowlist installed after the shim's start (the review's): three
   threads through a barrier and a mutex, with or without (argv[1] "gettid") gettid and
   openat allowed; the shim's threads joined with id -1 and the program hung */
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
