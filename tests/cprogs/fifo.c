/* "read": open a FIFO for reading (blocks in open(), which the shim does not see, until
   a writer opens it) and read it; "write": open it and write one line */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (strcmp(argv[2], "write") == 0) { int fd = open(argv[1], O_WRONLY); write(fd, "x\n", 2);
                                         close(fd); return 0; }
    printf("opening\n"); fflush(stdout);
    int fd = open(argv[1], O_RDONLY); char c[2]; read(fd, c, 2); printf("got %c\n", c[0]);
    return 0;
}
