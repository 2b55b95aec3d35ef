/* an OpenMP barrier loop: argv[1] steps of argv[2] µs of computing per thread */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    int steps = atoi(argv[1]); double us = atof(argv[2]); long done = 0;
    printf("start\n"); fflush(stdout);
    double t0 = now();
    #pragma omp parallel reduction(+:done)
    { for (int s = 0; s < steps; s++) { double e = now() + us * 1e-6; while (now() < e) { }
                                         done++;
        #pragma omp barrier
      } }
    printf("%ld steps by %d threads in %.6f s\n", done, omp_get_max_threads(), now() - t0);
    return done == (long)steps * omp_get_max_threads() ? 0 : 1;
}
