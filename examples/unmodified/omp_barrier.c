/* A bulk-synchronous OpenMP loop: every thread computes a fixed amount per step, then waits
 * at the team's barrier. The thread count is OpenMP's default (the CPUs this process may
 * use), as an unmodified program would have it.
 *
 *   gcc -O2 -fopenmp omp_barrier.c -o omp_barrier
 *   ./omp_barrier STEPS ITERS      (ITERS of a dependent floating-point recurrence per step)
 *
 * It checks itself: every thread must have completed every step before any thread left
 * the last barrier, and all threads computed the same value. It prints "ok" and exits 0
 * only then. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

static double work(long iters, double x)
{
    for (long i = 0; i < iters; i++)
        x = x * 0.9999999 + 1.0;    /* dependent: no vectorising, no memory traffic */
    return x;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s STEPS ITERS\n", argv[0]);
        return 2;
    }
    long steps = atol(argv[1]), iters = atol(argv[2]);
    if (steps < 1 || iters < 1) {
        fprintf(stderr, "%s: STEPS and ITERS must be positive\n", argv[0]);
        return 2;
    }
    int threads = omp_get_max_threads();
    long *done = calloc(threads, sizeof *done);
    double *acc = calloc(threads, sizeof *acc);
    int bad = 0;
#pragma omp parallel
    {
        int t = omp_get_thread_num();
        double x = 0.0;
        for (long s = 0; s < steps; s++) {
            x = work(iters, x);
            done[t] = s + 1;
#pragma omp barrier
            /* past the barrier: every partner has finished step s */
            for (int u = 0; u < omp_get_num_threads(); u++)
                if (done[u] < s + 1) {
#pragma omp atomic write
                    bad = 1;
                }
#pragma omp barrier
        }
        acc[t] = x;
    }
    for (int t = 1; t < threads; t++)
        if (acc[t] != acc[0])
            bad = 1;
    printf("omp_barrier threads=%d steps=%ld iters=%ld value=%.6f %s\n", threads, steps, iters,
           acc[0], bad ? "FAILED" : "ok");
    free(done);
    free(acc);
    return bad;
}
