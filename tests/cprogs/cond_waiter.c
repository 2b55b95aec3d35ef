/* A waiter on a condition variable while the main thread computes (and so runs) for
   0.3 s before it signals; the waiter works ~25 µs after each return of its wait.
   argv[1] "gap": it counts them ("returns=N"); "cancel": the main thread cancels it
   after 50 ms and, still computing, waits up to 5 s for its cleanup handler, which
   checks that it holds the mutex ("ok" or "FAILED"). */
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
