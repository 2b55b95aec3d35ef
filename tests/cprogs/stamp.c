/* the time (CLOCK_MONOTONIC) its main function began: under the shim, once it held a token */
#include <stdio.h>
#include <time.h>
int main(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    printf("started %.6f\n", t.tv_sec + t.tv_nsec * 1e-9); return 0;
}
