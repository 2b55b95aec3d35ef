/* Under one token: a thread polls a condition variable nobody signals, POLL_MS at a time,
   while the main thread holds the token, taking and giving back an uncontended read lock
   (entering the shim, so no early look takes it for a spinner), until the file STOP
   exists (at most 20 s). Each poll that runs out meanwhile queues the poller for the
   token. Prints "holding" once the main thread holds it.

     poll_waiter POLL_MS STOP */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static long poll_ms;
static int done;
static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                             return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static void *poller(void *a) {
    pthread_mutex_lock(&m);
    while (!__atomic_load_n(&done, __ATOMIC_RELAXED)) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += poll_ms * 1000000L;
        t.tv_sec += t.tv_nsec / 1000000000L;
        t.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&c, &m, &t);
    }
    pthread_mutex_unlock(&m);
    return a;
}
int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    poll_ms = atol(argv[1]);
    pthread_t t;
    pthread_create(&t, 0, poller, 0);
    struct timespec nap = {0, 20000000};
    nanosleep(&nap, 0);  /* the token to the poller meanwhile: it reaches its waits */
    printf("holding\n");
    fflush(stdout);
    double start = now_ms();
    while (access(argv[2], F_OK) != 0 && now_ms() < start + 20000) {
        pthread_rwlock_rdlock(&rw);
        pthread_rwlock_unlock(&rw);
    }
    __atomic_store_n(&done, 1, __ATOMIC_RELAXED);
    pthread_join(t, 0);
    return 0;
}
