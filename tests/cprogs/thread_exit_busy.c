/* The same gone thread's token while two threads spin, passing the one token left back
   and forth (each wait cut short by a rotation, none as long as the reclaim's period),
   until stdin is closed. */
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
static volatile int stop;
static void *gone(void *a) { volatile long x = 0; for (long i = 0; i < 100000; i++) x += i;
                             syscall(SYS_exit, 0); return a; }
static void *busy(void *a) { volatile long n = 0; while (!stop) n++; return a; }
int main(void) { pthread_t t, b[2]; char c;
                 pthread_create(&t, 0, gone, 0); pthread_join(t, 0);
                 for (int i = 0; i < 2; i++) pthread_create(&b[i], 0, busy, 0);
                 while (read(0, &c, 1) > 0) {}
                 stop = 1;
                 for (int i = 0; i < 2; i++) pthread_join(b[i], 0);
                 puts("done"); return 0; }
