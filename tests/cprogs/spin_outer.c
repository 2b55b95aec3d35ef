/* THREADS threads (argv[1]), ROUNDS each (argv[2]): a mutex taken and given back inside
   a spinlock held around ITERS (argv[3], 300 000 by default: ~0.5 ms) of work. The
   spinlock is taken by trylock and every failed try counted (busy): on one token a try
   fails only where the holder was rotated holding it, and the thread given the token
   spins for it ("ok" when the count adds up). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static pthread_spinlock_t s;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static volatile double sink;
static long count, rounds, iters, busy;
static void *body(void *a) {
    for (long r = 0; r < rounds; r++) {
        while (pthread_spin_trylock(&s) != 0) __atomic_add_fetch(&busy, 1, __ATOMIC_RELAXED);
        pthread_mutex_lock(&m); for (long k = 0; k < iters; k++) sink += k; count++;
        pthread_mutex_unlock(&m);
        pthread_spin_unlock(&s); }
    return a;
}
int main(int argc, char **argv) {
    int n = atoi(argv[1]); rounds = atol(argv[2]); iters = argc > 3 ? atol(argv[3]) : 300000;
    pthread_spin_init(&s, 0);
    pthread_t t[16];
    for (long i = 0; i < n; i++) pthread_create(&t[i], 0, body, 0);
    for (int i = 0; i < n; i++) pthread_join(t[i], 0);
    printf("%s busy=%ld\n", count == n * rounds ? "ok" : "FAILED", busy); return 0;
}
