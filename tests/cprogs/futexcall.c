/* a futex call through libc's syscall(), which the shim catches: in a process where the
   shim is loaded but dormant (no job), passed on as it is */
#include <linux/futex.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
int main(void) { int w = 0; struct timespec t = {0, 1000};
                 long a = syscall(SYS_futex, &w, FUTEX_WAKE, 1, 0, 0, 0);
                 long b = syscall(SYS_futex, &w, FUTEX_WAIT, 0, &t, 0, 0);
                 printf("wake %ld wait %ld\n", a, b); return 0; }
