/* The interposed OpenMP entry points, part 4: the lock functions. libgomp waits in them
   with inline futex calls that only the trap sees, one SIGSYS for the wait and another for
   the wake (~2.4 us each here, measured by benchmarks/bench_shim.py). Interposed at the
   entry point, a lock that is free is taken by omp_test_lock with the token kept, and one
   that is not is waited for parked, its futex calls made natively: a contended lock costs
   one park instead of two traps.

   Only for libgomp's locks, which wait in the kernel: LLVM's libomp exports the same names,
   but its queuing locks spin (yielding) while they wait, which must happen holding the
   token; its calls go straight through, and the shim sees their sched_yield calls.

   Not interposed, on purpose: barriers and critical sections (GOMP_barrier,
   GOMP_critical_start). Nothing tells before the call whether it will wait (the last
   thread at a barrier does not), and parking around one that does not wait hands the
   token to another job's thread for nothing: 8 % slower on two co-located barrier loops
   than the trap, which parks only the threads that do wait.

   Only under a passive wait policy (OMP_WAIT_POLICY=passive or GOMP_SPINCOUNT=0, which
   `coop` and `coop exec` set): a runtime that spins before it waits must spin holding its
   token, so otherwise these calls go straight through and the trap catches the wait
   where it happens, after the spin. */
#include "wrap.h"

#include <link.h>
#include <strings.h>

static int passive_policy = -1;

static int passive(void)
{
    if (__builtin_expect(passive_policy < 0, 0)) {
        const char *w = getenv("OMP_WAIT_POLICY"), *s = getenv("GOMP_SPINCOUNT");
        passive_policy = (w && strcasecmp(w, "passive") == 0) || (s && strcmp(s, "0") == 0);
    }
    return passive_policy;
}

/* whether `fn` is libgomp's (its file's name says so: a vendored copy is libgomp-<hash>) */
static int in_libgomp(void *fn)
{
    Dl_info where;
    return fn && dladdr(fn, &where) && where.dli_fname && strstr(where.dli_fname, "libgomp");
}

struct found {
    const char *name;
    void *self;  /* this library's base address: its own wrapper is never the answer */
    void *fn;
};

static int look_in(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct found *f = arg;
    if (!info->dlpi_name || !info->dlpi_name[0])
        return 0;  /* the program itself: RTLD_NEXT has looked there */
    void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
        return 0;
    void *fn = dlsym(h, f->name);
    dlclose(h);
    Dl_info where;
    if (!fn || !dladdr(fn, &where) || where.dli_fbase == f->self)
        return 0;
    f->fn = fn;
    return 1;
}

/* The runtime's own function: the next definition after this library, or, for a runtime
   loaded privately (dlopen'ed with RTLD_LOCAL, as numba loads libgomp, or a wheel's own
   copy such as libgomp-<hash>.so), its definition in whichever loaded library has one. */
static void *omp_real(const char *name)
{
    void *fn = dlsym(RTLD_NEXT, name);
    if (fn)
        return fn;
    Dl_info mine;
    struct found f = {name, dladdr((void *)omp_real, &mine) ? mine.dli_fbase : NULL, NULL};
    dl_iterate_phdr(look_in, &f);
    if (!f.fn)
        abort();  /* only a loaded library's call reaches this wrapper: one defines it */
    return f.fn;
}

#define O(name) RESOLVED(name, omp_real)

static int gomp_locks = -1;  /* the locks are libgomp's: they wait in the kernel */

static int parks_locks(void *real_fn)
{
    if (__builtin_expect(gomp_locks < 0, 0))
        gomp_locks = in_libgomp(real_fn);
    return gomp_locks && passive();
}

/* libgomp's mutex, the first int of both lock types (gcc's config/linux/mutex.h): 0 free,
   1 held, -1 held with sleepers */
struct lock_try {
    int (*test)(void *);
    void *lock;
};

static int lock_attempt(void *arg)
{
    struct lock_try *t = arg;
    return t->test(t->lock) != 0;
}

/* set: a lock that is free is taken by `test` with the token kept. One that is held is
   waited for parked and taken only holding a token again (hs_take_with_token): libgomp's
   own wait takes it as soon as the thread is woken, token or not. */
static void set_lock(void (*set)(void *), int (*test)(void *), void *lock)
{
    hs_took(0);
    if (!parks_locks((void *)set) || !hs_enter()) {
        set(lock);
        return;
    }
    struct lock_try t = {test, lock};
    struct hs_lockword w = {(int *)lock, -1, FUTEX_WAIT_PRIVATE};
    if (!lock_attempt(&t) && !hs_take_with_token(w, lock_attempt, &t)) {
        hs_t.selector = HS_SUD_ALLOW;  /* libgomp's own wait, its futex calls untrapped */
        hs_park();
        set(lock);
        hs_resume();
    }
    hs_exit();
}

/* unset only wakes: natively, no park; a release point (hs_release_point), which the held
   count keeps from acting where a nested lock stays held */
static void unset_lock(void (*unset)(void *), void *lock)
{
    hs_gave(0);
    if (!hs_may_enter()) {
        unset(lock);
        return;
    }
    hs_t.depth = 1;  /* inside (a rotation signal waits for hs_exit), the entry counted after
                        the unlock: the count is a write to the thread's record, which a
                        sibling spinning for this lock may have read, and a cache miss
                        inside the critical section lengthens a hot lock's serial path */
    hs_t.selector = HS_SUD_ALLOW;
    unset(lock);
    hs_entered();
    hs_release_point();
    hs_exit();
}

REAL(void, omp_set_lock, (void *));
REAL(int, omp_test_lock, (void *));
REAL(void, omp_unset_lock, (void *));
REAL(void, omp_set_nest_lock, (void *));
REAL(int, omp_test_nest_lock, (void *));
REAL(void, omp_unset_nest_lock, (void *));

HS_EXPORT void omp_set_lock(void *lock) { set_lock(O(omp_set_lock), O(omp_test_lock), lock); }
HS_EXPORT void omp_unset_lock(void *lock) { unset_lock(O(omp_unset_lock), lock); }
HS_EXPORT int omp_test_lock(void *lock)
{
    int got = O(omp_test_lock)(lock);
    hs_took(!got);
    return got;
}
HS_EXPORT int omp_test_nest_lock(void *lock)
{
    int depth = O(omp_test_nest_lock)(lock);
    hs_took(!depth);
    return depth;
}
HS_EXPORT void omp_set_nest_lock(void *lock)
{
    set_lock(O(omp_set_nest_lock), O(omp_test_nest_lock), lock);
}
HS_EXPORT void omp_unset_nest_lock(void *lock) { unset_lock(O(omp_unset_nest_lock), lock); }
