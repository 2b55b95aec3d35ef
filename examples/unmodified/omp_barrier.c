/* A bulk-synchronous OpenMP loop: every step's fixed amount of work is shared out among
 * the team's threads (an `omp for` over equal parts), and the loop's implied barrier ends
 * the step. The thread count is OpenMP's default (the CPUs this process may use), as an
 * unmodified program would have it; the work does not depend on it, so a job confined to
 * fewer CPUs (fewer threads) does the same work.
 *
 *   gcc -O2 -fopenmp omp_barrier.c -o omp_barrier
 *   ./omp_barrier STEPS ITERS      (ITERS of a dependent floating-point recurrence per
 *                                   step in all, about 1.6 ns each here)
 *
 * It checks itself: no thread may leave a step's barrier before every part of that step is
 * done, and the result must equal the one computed serially; it prints "ok" and exits 0
 * only then. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define PARTS 64    /* parts per step: an equal share for any thread count dividing 64 */

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
    long steps = atol(argv[1]), iters = atol(argv[2]) / PARTS;
    if (steps < 1 || iters < 1) {
        fprintf(stderr, "%s: STEPS must be positive and ITERS at least %d\n", argv[0], PARTS);
        return 2;
    }
    double acc[PARTS] = {0};
    long done[PARTS] = {0};
    int bad = 0, threads = 1;
#pragma omp parallel
    {
#pragma omp single
        threads = omp_get_num_threads();
        for (long s = 0; s < steps; s++) {
#pragma omp for schedule(static)
            for (int p = 0; p < PARTS; p++) {
                acc[p] = work(iters, acc[p]);
                done[p] = s + 1;
            }   /* the barrier: every part of step s is done past here */
            for (int p = 0; p < PARTS; p++)
                if (done[p] < s + 1) {
#pragma omp atomic write
                    bad = 1;
                }
#pragma omp barrier
        }
    }
    double want = work(steps * iters, 0.0);  /* the same operations in the same order */
    for (int p = 0; p < PARTS; p++)
        if (acc[p] != want)
            bad = 1;
    printf("omp_barrier threads=%d steps=%ld iters=%ld value=%.6f %s\n", threads, steps,
           iters * PARTS, want, bad ? "FAILED" : "ok");
    return bad;
}
