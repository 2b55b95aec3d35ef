/* Two threads, ROUNDS rounds each: some work, then as much again under one mutex
   (argv[1]); prints "ok" when the shared total is right. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static long rounds, total;
static volatile double sink;
static void work(void) { double x = 0; for (int i = 0; i < 300; i++) x = x * 0.9999999 + 1.0;
                         sink = x; }
static void *body(void *a) {
    for (long r = 0; r < rounds; r++) {
        work();
        pthread_mutex_lock(&m); work(); total++; pthread_mutex_unlock(&m);
    }
    return a;
}
int main(int argc, char **argv) {
    rounds = atol(argv[1]);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, body, 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
    puts(total == 2 * rounds ? "ok" : "FAILED");
    return total != 2 * rounds;
}
