/* A lock-contended OpenMP loop: ROUNDS rounds shared out among the team's threads, each a
 * little work of its own and then an update of a shared total under one omp_lock_t
 * (libgomp's futex-based mutex). Thread count: OpenMP's default; the work does not depend
 * on it. A preempted lock holder stalls every thread that wants the lock.
 *
 *   gcc -O2 -fopenmp omp_lock.c -o omp_lock
 *   ./omp_lock ROUNDS ITERS_OUTSIDE ITERS_INSIDE
 *
 * It checks itself: the shared total is exactly what every round added; it prints "ok"
 * and exits 0 only then. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

static double work(long iters, double x)
{
    for (long i = 0; i < iters; i++)
        x = x * 0.9999999 + 1.0;
    return x;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s ROUNDS ITERS_OUTSIDE ITERS_INSIDE\n", argv[0]);
        return 2;
    }
    long rounds = atol(argv[1]), outside = atol(argv[2]), inside = atol(argv[3]);
    if (rounds < 1 || outside < 0 || inside < 0) {
        fprintf(stderr, "%s: ROUNDS must be positive, the ITERS not negative\n", argv[0]);
        return 2;
    }
    omp_lock_t lock;
    omp_init_lock(&lock);
    long total = 0;     /* guarded by lock */
    double sink = 0.0;  /* guarded by lock: keeps the work from being optimised away */
    double own = 0.0;   /* the work outside the lock, kept for the same reason */
    int threads = 1;
#pragma omp parallel
    {
#pragma omp single
        threads = omp_get_num_threads();
        double x = 0.0;
#pragma omp for schedule(static)
        for (long r = 0; r < rounds; r++) {
            x = work(outside, x);
            omp_set_lock(&lock);
            sink = work(inside, sink);
            total += 1;
            omp_unset_lock(&lock);
        }
#pragma omp atomic update
        own += x;
    }
    omp_destroy_lock(&lock);
    int ok = total == rounds;
    printf("omp_lock threads=%d rounds=%ld total=%ld sink=%.3f own=%.3f %s\n", threads,
           rounds, total, sink, own, ok ? "ok" : "FAILED");
    return !ok;
}
