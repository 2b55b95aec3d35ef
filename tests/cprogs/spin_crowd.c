/* One thread holds a spinlock for HOLD_MS (argv[1]) of work while WAITERS threads
   (argv[2]) wait for it in pthread_spin_lock; "ok" once every waiter has had it. */
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
