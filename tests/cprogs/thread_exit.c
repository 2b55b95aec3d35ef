/* a thread that ends by the raw exit system call, holding its token: no TLS destructor
   runs, so only the arbiter's per-thread liveness can give its token back */
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
static void *body(void *a) { volatile long x = 0; for (long i = 0; i < 100000; i++) x += i;
                             syscall(SYS_exit, 0); return a; }
int main(void) { pthread_t t; pthread_create(&t, 0, body, 0); pthread_join(t, 0);
                 puts("joined"); return 0; }
