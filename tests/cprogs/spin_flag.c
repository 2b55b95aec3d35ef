/* argv[1] a file of 4 bytes shared by two processes; "wait": spin (calling nothing)
   until the other has set it ("deaf": with every signal blocked by the raw system
   call, past the shim's wrappers); "set": set it */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int fd = open(argv[1], O_RDWR);
    volatile int *flag = mmap(0, 4, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (strcmp(argv[2], "set") == 0) { *flag = 1; puts("set"); return 0; }
    if (strcmp(argv[2], "deaf") == 0) { unsigned long all = ~0UL; syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, 0, 8); }
    printf("spinning\n"); fflush(stdout);
    while (*flag == 0) { }
    puts("released"); return 0;
}
