/* a futex wait through syscall() on a page that cannot be read, while another thread
   of the job runs: the kernel's answer, EFAULT, as without the shim */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
static volatile int stop;
static void *busy(void *a) { while (!stop) { } return a; }
int main(void) {
    pthread_t t; pthread_create(&t, 0, busy, 0);
    int *word = mmap(0, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    long r = syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 0, 0, 0, 0);
    int e = errno; stop = 1; pthread_join(t, 0);
    printf("%ld %s\n", r, r == -1 ? strerror(e) : "-"); return 0;
}
