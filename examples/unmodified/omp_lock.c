/* A lock-contended OpenMP loop: ROUNDS rounds shared out among the team's threads, each a
 * little work of its own and then an update of a shared total under one lock: an
 * omp_lock_t (libgomp's futex-based mutex, whose waits OMP_WAIT_POLICY and GOMP_SPINCOUNT
 * govern), or with KIND `spin` a pthread spinlock (whose waiters spin whatever the
 * environment says, as codes that guard short updates with one do). Thread count:
 * OpenMP's default; the work does not depend on it. A preempted lock holder stalls every
 * thread that wants the lock; a spinning waiter burns its CPU meanwhile.
 *
 *   gcc -O2 -fopenmp omp_lock.c -o omp_lock
 *   ./omp_lock ROUNDS ITERS_OUTSIDE ITERS_INSIDE [omp|spin]
 *
 * It checks itself: the shared total is exactly what every round added; it prints "ok"
 * and exits 0 only then. */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double work(long iters, double x)
{
    for (long i = 0; i < iters; i++)
        x = x * 0.9999999 + 1.0;
    return x;
}

int main(int argc, char **argv)
{
    int spin = argc == 5 && strcmp(argv[4], "spin") == 0;
    if ((argc != 4 && argc != 5) || (argc == 5 && !spin && strcmp(argv[4], "omp") != 0)) {
        fprintf(stderr, "usage: %s ROUNDS ITERS_OUTSIDE ITERS_INSIDE [omp|spin]\n", argv[0]);
        return 2;
    }
    long rounds = atol(argv[1]), outside = atol(argv[2]), inside = atol(argv[3]);
    if (rounds < 1 || outside < 0 || inside < 0) {
        fprintf(stderr, "%s: ROUNDS must be positive, the ITERS not negative\n", argv[0]);
        return 2;
    }
    omp_lock_t lock;
    pthread_spinlock_t spinlock;
    omp_init_lock(&lock);
    pthread_spin_init(&spinlock, PTHREAD_PROCESS_PRIVATE);
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
            if (spin)
                pthread_spin_lock(&spinlock);
            else
                omp_set_lock(&lock);
            sink = work(inside, sink);
            total += 1;
            if (spin)
                pthread_spin_unlock(&spinlock);
            else
                omp_unset_lock(&lock);
        }
#pragma omp atomic update
        own += x;
    }
    omp_destroy_lock(&lock);
    pthread_spin_destroy(&spinlock);
    int ok = total == rounds;
    printf("omp_lock %s threads=%d rounds=%ld total=%ld sink=%.3f own=%.3f %s\n", spin ? "spin" : "omp", threads,
           rounds, total, sink, own, ok ? "ok" : "FAILED");
    return !ok;
}
