/* A child that computes holding a token (it printed "busy"), killed and reaped by its
   parent, which then prints "reaped PID" and waits for its stdin to close. */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void) {
    int ready[2];
    if (pipe(ready)) return 2;
    pid_t child = fork();
    if (child == 0) {
        if (write(ready[1], "b", 1) != 1) _exit(2);
        for (volatile long i = 0;; i++) { }
    }
    char c;
    if (read(ready[0], &c, 1) != 1) return 2;
    kill(child, SIGKILL);
    int st;
    if (waitpid(child, &st, 0) != child || !WIFSIGNALED(st)) return 3;
    printf("reaped %d\n", (int)child);
    fflush(stdout);
    while (read(0, &c, 1) > 0) { }
    return 0;
}
