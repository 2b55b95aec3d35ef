/* What the process that owns jobs does to the segment, through ctypes, where it runs no
   Python worker and so loads no numba (`coop exec`: its start was ~0.8 s, most of it numba's
   import and the loading of the arbiter's compiled rules): the arbiter's mutex taken and
   given back, a worker's slot freed and a holder's token taken (the rules of rules.c,
   which tests/coop/test_shim_rules_match_workers.py holds equal to coop/rules.py byte for
   byte), a new holder pinned and woken (the shim's own post). coop/ops.py's ShimOps calls
   these; oslayer/native.py does the same for a process with Python workers. The library
   is dormant in that process: its constructor acts only in a command launched with a
   job's key. */
#include "wrap.h"
#include <time.h>

REAL(int, pthread_mutex_trylock, (pthread_mutex_t *));
REAL(int, pthread_mutex_timedlock, (pthread_mutex_t *, const struct timespec *));
REAL(int, pthread_mutex_unlock, (pthread_mutex_t *));
REAL(int, pthread_mutex_consistent, (pthread_mutex_t *));

/* After a lock call returned `r`: whether the mutex is now the caller's; taken from a dead
   owner, it is made consistent and the death notice set (native._took) */
static int took(uint8_t *region, int r)
{
    if (r == EOWNERDEAD) {
        R(pthread_mutex_consistent)((pthread_mutex_t *)region);
        region[HS_DIED_AT] = 1;
    }
    return r == 0 || r == EOWNERDEAD;
}

/* The mutex if free: `*held` set in the same call that takes it, so that a caller which
   gives it back whenever `*held` is set never leaks it, whenever a Ctrl-C comes. The lock
   call's result. */
HS_EXPORT int hs_x_lock_try(uint8_t *region, int8_t *held)
{
    int r = R(pthread_mutex_trylock)((pthread_mutex_t *)region);
    if (took(region, r))
        *held = 1;
    return r;
}

/* The same, waiting at most `ns` for it (ETIMEDOUT then): one slice of the caller's wait,
   between which it looks at signals */
HS_EXPORT int hs_x_lock_wait(uint8_t *region, int8_t *held, int64_t ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);  /* the clock pthread_mutex_timedlock reads */
    int64_t total = ts.tv_nsec + ns;
    ts.tv_sec += total / 1000000000LL;
    ts.tv_nsec = total % 1000000000LL;
    int r = R(pthread_mutex_timedlock)((pthread_mutex_t *)region, &ts);
    if (took(region, r))
        *held = 1;
    return r;
}

/* The mutex given back if `*held` says it was taken, and `*held` cleared, in one call: a
   Ctrl-C between the two can neither leak it nor give it back twice */
HS_EXPORT int hs_x_unlock(uint8_t *region, int8_t *held)
{
    if (!*held)
        return 0;
    *held = 0;
    return R(pthread_mutex_unlock)((pthread_mutex_t *)region);
}

HS_EXPORT void hs_x_post(struct hs_view *v, int slot)
{
    hs_post(v, slot);
}

HS_EXPORT int hs_x_revoke_holder(struct hs_view *v, int w, int64_t now)
{
    return hs_rule_revoke_holder(v, w, now);
}
