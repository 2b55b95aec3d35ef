/* THREADS threads, ROUNDS each, of a plain and a nested OpenMP lock taken around a few
   iterations: many sleepers at once, so a wake-up lost by the shim's lock wait hangs it */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int threads = atoi(argv[1]); long rounds = atol(argv[2]), total = 0, nested = 0;
    omp_lock_t l; omp_nest_lock_t n; omp_init_lock(&l); omp_init_nest_lock(&n);
    volatile double x = 0;
    #pragma omp parallel num_threads(threads)
    for (long r = 0; r < rounds; r++) {
        omp_set_lock(&l); for (int i = 0; i < 200; i++) x = x * 0.5 + 1; total++; omp_unset_lock(&l);
        omp_set_nest_lock(&n); omp_set_nest_lock(&n); nested++;
        omp_unset_nest_lock(&n); omp_unset_nest_lock(&n);
    }
    int ok = total == threads * rounds && nested == threads * rounds;
    puts(ok ? "ok" : "FAILED");
    return !ok;
}
