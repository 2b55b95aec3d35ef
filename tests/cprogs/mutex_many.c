/* glibc's mutexes of argv[1]'s kind ("normal": the default attribute, "settype-normal":
   the same type given to pthread_mutexattr_settype, "recursive", "errorcheck",
   "adaptive", "pshared") under many sleepers: THREADS threads (argv[2]) take it ROUNDS times each
   (argv[3]; the recursive one twice), then half of them produce ROUNDS items each into
   a one-slot box guarded by it and two condition variables, the other half take them
   (with a timed wait, far off); an error-checking one locked again by its owner answers
   EDEADLK. A wake-up lost hangs it; "ok" when every count adds up. */
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
