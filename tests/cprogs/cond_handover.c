/* A condition variable's waiter, woken while the signaller keeps the only token: glibc
   takes the mutex back for it at once. The signaller watches the mutex for 50 ms while
   calling into the shim (a read lock's: no rotation) and says whether it was still held
   at the end ("held_at_end=1": by the waiter, without a token). argv[1]: the mutex's
   type for pthread_mutexattr_settype, or -1 for the default attribute. */
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
