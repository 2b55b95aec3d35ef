/* Under one token: the main thread starts a thread that waits on a condition variable
   for 50 ms (nobody signals it: it times out) and one that waits on a semaphore, sleeps
   20 ms meanwhile (both reach their waits), then holds the token for 200 ms taking and
   giving back an uncontended read lock (entering the shim, so no early look takes it for
   a spinner), posts the semaphore 100 ms into that and joins them. Both queued for the
   token while it ran, the timed-out one first; prints the order in which they ran on,
   and whether the timed wait timed out ("posted timed 1": the posted one went first). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <time.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static sem_t s;
static const char *order[2] = {"none", "none"};
static int n, timed_out;
static void ran(const char *who) { order[__atomic_fetch_add(&n, 1, __ATOMIC_SEQ_CST)] = who; }
static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                             return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static void *timed(void *a) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += 50000000;
    if (t.tv_nsec >= 1000000000) { t.tv_sec += 1; t.tv_nsec -= 1000000000; }
    pthread_mutex_lock(&m);
    timed_out = pthread_cond_timedwait(&c, &m, &t) == ETIMEDOUT;
    ran("timed");
    pthread_mutex_unlock(&m);
    return a;
}
static void *posted(void *a) { while (sem_wait(&s) != 0) { } ran("posted"); return a; }
int main(void) {
    pthread_t t, p;
    sem_init(&s, 0, 0);
    pthread_create(&t, 0, timed, 0);
    pthread_create(&p, 0, posted, 0);
    struct timespec nap = {0, 20000000};
    nanosleep(&nap, 0);
    double start = now_ms();
    int post = 1;
    while (now_ms() < start + 200) {
        pthread_rwlock_rdlock(&rw);
        pthread_rwlock_unlock(&rw);
        if (post && now_ms() >= start + 100) { sem_post(&s); post = 0; }
    }
    pthread_join(t, 0);
    pthread_join(p, 0);
    printf("%s %s %d\n", order[0], order[1], timed_out);
    return 0;
}
