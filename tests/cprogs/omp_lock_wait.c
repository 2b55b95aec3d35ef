/* OpenMP lock contention, made certain, ROUNDS times: thread 0 takes the lock before
   a barrier and lets it go 2 ms after it, so thread 1's omp_set_lock waits ("contend";
   "alone": it does not ask). The barriers are pthread's, which the shim serves without
   a trap, so what is trapped is libgomp's own: the lock's waits and wakes, and the end
   of the parallel region. As a shared library (-DAS_LIBRARY) its run() is what a
   program that dlopens it privately calls (RTLD_LOCAL, as numba loads libgomp). */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#define ROUNDS 10
int run(int contend) {
    omp_lock_t l; omp_init_lock(&l); int got = 0;
    pthread_barrier_t b; pthread_barrier_init(&b, 0, 2);
    #pragma omp parallel num_threads(2)
    { int me = omp_get_thread_num();
      for (int r = 0; r < ROUNDS; r++) {
          if (me == 0) omp_set_lock(&l);
          pthread_barrier_wait(&b);
          if (me == 0) { usleep(2000); omp_unset_lock(&l); }
          else if (contend) { omp_set_lock(&l); got++; omp_unset_lock(&l); }
          pthread_barrier_wait(&b); } }
    omp_destroy_lock(&l);
    return got == (contend ? ROUNDS : 0);
}
#ifndef AS_LIBRARY
int main(int argc, char **argv) { int ok = run(strcmp(argv[1], "contend") == 0);
                                  puts(ok ? "ok" : "FAILED"); return !ok; }
#endif
