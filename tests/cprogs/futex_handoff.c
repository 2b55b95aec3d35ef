/* argv[1] rounds of a futex hand-off through syscall(): the main thread waits for the
   word to reach the round's number, which the other thread sets a few µs after it saw
   the round begin, then wakes it; with argv[2] "handler", a SIGUSR1 handler that
   interrupts waits (no SA_RESTART) is installed first, never used */
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
static void on_usr1(int sig) { (void)sig; }
static volatile int go, word;
static long rounds;
static void *setter(void *a) {
    for (int r = 1; r <= rounds; r++) {
        while (go != r) { }
        for (volatile int i = 0; i < 2000; i++) { }
        __atomic_store_n(&word, r, __ATOMIC_RELEASE);
        syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0); }
    return a;
}
int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[2], "handler") == 0) {
        struct sigaction sa; memset(&sa, 0, sizeof sa); sa.sa_handler = on_usr1;
        sigaction(SIGUSR1, &sa, 0); }
    rounds = atol(argv[1]); pthread_t t; pthread_create(&t, 0, setter, 0);
    for (int r = 1; r <= rounds; r++) {
        go = r;
        while (__atomic_load_n(&word, __ATOMIC_ACQUIRE) != r)
            syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, r - 1, 0, 0, 0); }
    pthread_join(t, 0); puts("ok"); return 0;
}
