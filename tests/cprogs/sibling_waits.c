/* the main thread starts a thread that only sets a flag, then, with argv[1] "spin",
   spins (calling nothing) until the flag is set; with "locks", takes and gives back an
   uncontended rwlock (its lock enters the shim, its unlock does not) for argv[2] ms
   (clock_gettime is not the shim's) and says whether the thread had run meanwhile ("ran") or not ("waited"); "mutex": the same with a
   mutex, whose unlock is a scheduling point; with "locks_spin", the same as "locks",
   then spins until the flag is set and says "ok" if the thread had waited; with "pair", starts a second
   thread first that spins until the flag is set while the main thread takes and gives
   back the rwlock until then; with "deaf", blocks every signal by the raw system call
   first, spins until the flag is set, then unblocks them; with "many", starts 3 threads
   that print their voluntary context switches once they run, while the main thread
   takes and gives back the rwlock for argv[2] ms */
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
