/* Two processes of one job (a script whose forked workers each run a BLAS pool): the
   child's main thread keeps its token, calling an uncontended mutex (it enters the shim:
   no early look takes it for a spinner). The parent's second thread sleeps on a
   condition variable until the main thread posts it work, as OpenBLAS's caller posts its
   pool thread's; then it counts, calling nothing, while the main thread spins, calling
   nothing. The main thread prints "gang" once it has seen the count move while it ran
   itself (both held tokens at once), "apart" if not within argv[1] s. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static volatile long count;
static volatile int *stop;
static int posted;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;
static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                             return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static void *counter(void *a) {
    pthread_mutex_lock(&m);
    while (!posted) pthread_cond_wait(&work, &m);
    pthread_mutex_unlock(&m);
    while (!stop[0]) count++;
    return a;
}
int main(int argc, char **argv) {
    stop = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int ready[2];
    if (argc != 2 || stop == MAP_FAILED || pipe(ready)) return 2;
    pid_t child = fork();
    if (child == 0) {
        pthread_mutex_t mine = PTHREAD_MUTEX_INITIALIZER;
        if (write(ready[1], "r", 1) != 1) _exit(2);
        while (!stop[0]) { pthread_mutex_lock(&mine); pthread_mutex_unlock(&mine); }
        _exit(0);
    }
    char c;
    if (read(ready[0], &c, 1) != 1) return 2;
    pthread_t t;
    pthread_create(&t, 0, counter, 0);
    struct timespec nap = {0, 20000000};
    nanosleep(&nap, 0);  /* the thread sleeps on the variable by now */
    pthread_mutex_lock(&m);
    posted = 1;
    pthread_cond_signal(&work);
    pthread_mutex_unlock(&m);
    double end = now_us() + atof(argv[1]) * 1e6;
    int seen = 0;
    while (!seen && now_us() < end) {
        double t0 = now_us();
        long c0 = count;
        while (now_us() - t0 < 20) { }
        seen = count != c0 && now_us() - t0 < 40;  /* it counted while this one ran */
    }
    stop[0] = 1;
    pthread_join(t, 0);
    int status;
    waitpid(child, &status, 0);
    puts(seen ? "gang" : "apart");
    return 0;
}
