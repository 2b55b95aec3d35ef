/* Two threads taking TURNS turns each by sched_yield (as a runtime's spin-with-yield
   waits for its partner): prints the yields the waiting side made per turn. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#define TURNS 2000
static volatile int turn;
static long yields[2];
static void *body(void *a) {
    int me = (int)(long)a;
    for (int i = 0; i < TURNS; i++) {
        while (turn != me)
            yields[me]++, sched_yield();
        turn = 1 - me;
    }
    return a;
}
int main(void) { pthread_t t[2];
                 for (long i = 0; i < 2; i++) pthread_create(&t[i], 0, body, (void *)i);
                 for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
                 printf("%.1f\n", (yields[0] + yields[1]) / (2.0 * TURNS)); return 0; }
