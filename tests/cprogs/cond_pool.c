/* OpenBLAS's pattern: a pool thread sleeps on a condition variable between jobs, which
   the main thread posts after some work of its own (an eighth of a job's) and then
   waits for by spinning on a flag (calling nothing). ROUNDS jobs (argv[1]); the pool
   thread counts the returns of its wait that found no job (spurious wake-ups). "ok"
   when every job ran. argv[2] "extra": a third thread sleeps on another condition
   variable meanwhile; "pshared": the mutex and the variable are process-shared. */
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
