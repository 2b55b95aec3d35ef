/* waits for it in pthread_spin_lock: "spinning" once it is about to, then the time
   (CLOCK_MONOTONIC) the holder gave it back. */
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
