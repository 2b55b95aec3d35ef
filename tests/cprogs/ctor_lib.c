/* a library whose constructor locks and unlocks a mutex: linked by "ctor_main", it is
   initialised before the shim, whose constructor has not run yet */
#include <pthread.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static int ran;
__attribute__((constructor)) static void early(void) { pthread_mutex_lock(&m); ran = 1;
                                                       pthread_mutex_unlock(&m); }
int ctor_ran(void) { return ran; }
