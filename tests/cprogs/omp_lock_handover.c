/* Who takes a lock that is let go while a thread sleeps on it, ROUNDS times: thread 0
   holds it until thread 1 sleeps on it (the lock is marked as having sleepers: -1 for
   an OpenMP lock, argv[1] "omp"; 2 for a glibc mutex, "mutex"), lets it go, and watches
   it for 50 ms while calling into the shim (a read lock's: a computing holder, which
   nobody asks to rotate and which gives no turn). "stolen" counts the rounds in which
   thread 1 took it meanwhile, without the only token, which thread 0 holds. */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define ROUNDS 10
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + t.tv_nsec * 1e-9; }
static omp_lock_t l;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static int omp;
static void take(void) { if (omp) omp_set_lock(&l); else pthread_mutex_lock(&m); }
static void give(void) { if (omp) omp_unset_lock(&l); else pthread_mutex_unlock(&m); }
int main(int argc, char **argv) {
    omp = strcmp(argv[1], "omp") == 0; omp_init_lock(&l);
    volatile int *word = omp ? (volatile int *)&l : &m.__data.__lock;
    int sleepers = omp ? -1 : 2;
    pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
    volatile int round = -1, done = -1; int stolen = 0;
    #pragma omp parallel num_threads(2)
    { int me = omp_get_thread_num();
      for (int r = 0; r < ROUNDS; r++) {
          if (me == 1) { while (round != r) usleep(100);
                         take(); give(); done = r; continue; }
          take(); round = r;
          while (*word != sleepers) usleep(100);
          give();
          double end = now() + 0.05;
          while (*word == 0 && now() < end) { pthread_rwlock_rdlock(&rw); pthread_rwlock_unlock(&rw); }
          stolen += *word != 0;
          while (done != r) usleep(100); } }
    printf("stolen=%d\n", stolen);
    return 0;
}
