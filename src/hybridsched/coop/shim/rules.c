/* The arbiter's token rules in C, on the bytes hybridsched/coop/layout.py defines: the
   rules of coop/rules.py (compiled with numba for the Python workers) and the membership
   of coop/state.py, statement for statement, so that shim threads and Python workers obey
   one arbiter. tests/coop/test_shim_rules_match_workers.py drives both through the same random sequences
   of operations and compares the segments byte for byte; change one, change the other.
   Every function but the lazy park's expects the caller to hold the arbiter's mutex. */
#include "coop.h"

size_t hs_view_init(struct hs_view *v, void *base, int ncpu, int njobs, int nworkers)
{
    size_t off[HS_NREGIONS];
    char *b = base;
    v->size = hs_region_offsets(ncpu, njobs, nworkers, off);
    v->h = (struct hs_header *)(b + off[0]);
    v->cpus = (struct hs_cpu *)(b + off[1]);
    v->jobs = (struct hs_job *)(b + off[2]);
    v->workers = (struct hs_worker *)(b + off[3]);
    v->wake = (int32_t *)(b + off[4]);
    v->lock = (unsigned char *)(b + off[5]);
    v->ncpu = ncpu;
    v->njobs = njobs;
    v->nworkers = nworkers;
    return v->size;
}

int hs_holds_another(struct hs_view *v, int32_t pid, int but)
{
    for (int ci = 0; ci < v->ncpu; ci++) {
        int h = v->cpus[ci].holder;
        if (ci != but && h >= 0 && v->workers[h].pid == pid)
            return 1;
    }
    return 0;
}

/* coop/rules.py first_waiter: the job's longest waiter, or a shim thread whose process
   holds a token other than `ci`'s and that queued at most HS_PREF_SPAN tickets after it */
static int first_waiter(struct hs_view *v, int hi, int job, int ci)
{
    int best = -1;
    int64_t seq = 0;
    for (int w = 0; w < hi; w++) {
        struct hs_worker *r = &v->workers[w];
        if (r->used == 1 && hs_ld(&r->state) == HS_WAITING && r->job == job
            && (best < 0 || r->seq < seq)) {
            best = w;
            seq = r->seq;
        }
    }
    int pref = -1;
    int64_t pseq = 0;
    for (int w = 0; best >= 0 && w < hi; w++) {
        struct hs_worker *r = &v->workers[w];
        if (r->used == 1 && hs_ld(&r->state) == HS_WAITING && r->job == job && r->thread
            && r->seq <= seq + HS_PREF_SPAN && (pref < 0 || r->seq < pseq)
            && hs_holds_another(v, r->pid, ci)) {
            pref = w;
            pseq = r->seq;
        }
    }
    return pref >= 0 ? pref : best;
}

static int next_job(struct hs_view *v, int hi, int exclude)
{
    struct hs_header *h = v->h;
    int njobs = v->njobs;
    if (hs_ld(&h->waiting) <= 0)
        return -1;
    int best = -1, dist = njobs, start = h->rr;
    for (int w = 0; w < hi; w++) {
        struct hs_worker *r = &v->workers[w];
        if (r->used == 1 && hs_ld(&r->state) == HS_WAITING && r->job != exclude) {
            int d = ((r->job - start) % njobs + njobs) % njobs;  /* Python's modulo */
            if (d < dist) {
                best = r->job;
                dist = d;
            }
        }
    }
    if (best >= 0)
        h->rr = (best + 1) % njobs;
    return best;
}

static int grant(struct hs_view *v, int w, int ci, int64_t now, int keep_quantum)
{
    struct hs_header *h = v->h;
    struct hs_worker *r = &v->workers[w];
    if (hs_ld(&r->state) == HS_WAITING)
        h->waiting -= 1;  /* changed only under the mutex */
    struct hs_cpu *c = &v->cpus[ci];
    c->holder = w;
    if (!keep_quantum || c->job != r->job) {
        c->since_ns = now;
        c->job = r->job;
    }
    hs_st(&r->state, HS_RUNNING);
    r->cpu = ci;
    r->last_cpu = ci;
    r->acquired_ns = now;
    h->grants += 1;
    hs_st(&v->wake[w], 1);
    return w;
}

static void drop(struct hs_view *v, int w, int64_t now, int state)
{
    struct hs_worker *r = &v->workers[w];
    r->held_ns += now - r->acquired_ns;
    hs_st(&r->state, state);
    r->cpu = -1;
    hs_st(&v->wake[w], 0);
}

static void enqueue(struct hs_view *v, int w)
{
    struct hs_header *h = v->h;
    h->seq += 1;
    struct hs_worker *r = &v->workers[w];
    r->seq = h->seq;
    hs_st(&r->state, HS_WAITING);
    hs_st(&v->wake[w], 0);
    __atomic_fetch_add(&h->waiting, 1, __ATOMIC_SEQ_CST);  /* a full fence before looking for LAZY tokens */
}

static int free_cpu(struct hs_view *v, int prefer)
{
    if (prefer >= 0 && v->cpus[prefer].holder < 0)
        return prefer;
    for (int ci = 0; ci < v->ncpu; ci++)
        if (v->cpus[ci].holder < 0)
            return ci;
    return -1;
}

static int pass_token(struct hs_view *v, int hi, int ci, int job, int64_t now)
{
    int target = first_waiter(v, hi, job, ci);
    if (target >= 0)
        return grant(v, target, ci, now, 1);
    int j = next_job(v, hi, -1);
    if (j >= 0)
        return grant(v, first_waiter(v, hi, j, ci), ci, now, 0);
    v->cpus[ci].holder = -1;
    v->cpus[ci].job = -1;
    return -1;
}

static int revoke_lazy(struct hs_view *v, int hi, int64_t now)
{
    if (hs_ld(&v->h->waiting) <= 0)
        return -1;
    for (int ci = 0; ci < v->ncpu; ci++) {
        int h = v->cpus[ci].holder;
        if (h >= 0 && hs_cas(&v->workers[h].state, HS_LAZY, HS_BLOCKED)) {
            struct hs_worker *r = &v->workers[h];
            r->held_ns += now - r->acquired_ns;
            r->cpu = -1;
            hs_st(&v->wake[h], 0);
            return pass_token(v, hi, ci, r->job, now);
        }
    }
    return -1;
}

void hs_rule_acquire(struct hs_view *v, int w, int64_t now, int woken[2])
{
    int hi = v->h->hi;
    struct hs_worker *r = &v->workers[w];
    int st = hs_ld(&r->state);
    woken[0] = woken[1] = -1;
    if (st == HS_RUNNING || st == HS_WAITING)
        return;
    int ci = free_cpu(v, r->last_cpu);
    if (ci >= 0) {
        woken[0] = grant(v, w, ci, now, 0);
        return;
    }
    enqueue(v, w);
    woken[1] = revoke_lazy(v, hi, now);
}

int hs_rule_try_acquire(struct hs_view *v, int w, int64_t now)
{
    struct hs_worker *r = &v->workers[w];
    int st = hs_ld(&r->state);
    if (st == HS_RUNNING)
        return 1;
    if (hs_ld(&v->h->waiting) > 0 || st == HS_WAITING)
        return 0;
    int ci = free_cpu(v, -1);
    if (ci < 0)
        return 0;
    grant(v, w, ci, now, 0);
    return 1;
}

int hs_rule_release(struct hs_view *v, int w, int64_t now)
{
    int hi = v->h->hi;
    struct hs_worker *r = &v->workers[w];
    int ci = r->cpu;
    if (hs_ld(&r->state) != HS_RUNNING || ci < 0)
        return -1;
    drop(v, w, now, HS_BLOCKED);
    return pass_token(v, hi, ci, r->job, now);
}

int hs_rule_lazy_park(struct hs_view *v, int w)
{
    int32_t *state = &v->workers[w].state;
    if (hs_ld(&v->h->waiting) > 0 || hs_ld(state) != HS_RUNNING)
        return 0;
    hs_st(&v->wake[w], 0);  /* before LAZY is visible: a resumer's wake word store comes after it */
    if (!hs_cas(state, HS_RUNNING, HS_LAZY))
        return 0;
    if (__atomic_load_n(&v->h->waiting, __ATOMIC_SEQ_CST) > 0) {  /* somebody queued meanwhile */
        hs_cas(state, HS_LAZY, HS_RUNNING);  /* fails if revoked */
        return 0;
    }
    return 1;
}

int hs_rule_lazy_resume(struct hs_view *v, int w)
{
    return hs_cas(&v->workers[w].state, HS_LAZY, HS_RUNNING);
}

int hs_rule_expired(struct hs_view *v, int w, int64_t now)
{
    int ci = v->workers[w].cpu;
    struct hs_header *h = v->h;
    return ci >= 0 && hs_ld(&h->waiting) > 0 && now - v->cpus[ci].since_ns >= h->quantum_ns;
}

void hs_rule_boundary(struct hs_view *v, int w, int64_t now, int woken[2])
{
    int hi = v->h->hi;
    struct hs_worker *r = &v->workers[w];
    int ci = r->cpu;
    woken[0] = woken[1] = -1;
    if (hs_ld(&r->state) != HS_RUNNING || ci < 0)
        return;
    struct hs_header *h = v->h;
    if (now - v->cpus[ci].since_ns < h->quantum_ns)
        return;
    int j = next_job(v, hi, r->job);
    int target = first_waiter(v, hi, j >= 0 ? j : r->job, ci);
    if (target < 0) {
        v->cpus[ci].since_ns = now;  /* nobody waits: a fresh quantum, keep running */
        return;
    }
    drop(v, w, now, HS_WAITING);
    enqueue(v, w);
    h->rotations += 1;
    woken[0] = grant(v, target, ci, now, 0);
    woken[1] = revoke_lazy(v, hi, now);
}

int hs_rule_leave_worker(struct hs_view *v, int w, int64_t now)
{
    int woken = -1;
    struct hs_worker *r = &v->workers[w];
    hs_cas(&r->state, HS_LAZY, HS_RUNNING);  /* a dead parker's token: released like a running one's */
    if (hs_ld(&r->state) == HS_RUNNING)
        woken = hs_rule_release(v, w, now);
    if (hs_ld(&r->state) == HS_WAITING)
        v->h->waiting -= 1;
    r->used = 0;
    hs_st(&r->state, HS_FREE);
    return woken;
}

/* coop/rules.py revoke_holder: the token of a RUNNING worker that cannot give it back */
int hs_rule_revoke_holder(struct hs_view *v, int w, int64_t now)
{
    struct hs_worker *r = &v->workers[w];
    int ci = r->cpu;
    if (ci < 0 || !hs_cas(&r->state, HS_RUNNING, HS_BLOCKED))
        return -1;
    r->held_ns += now - r->acquired_ns;
    r->cpu = -1;
    hs_st(&v->wake[w], 0);
    return pass_token(v, v->h->hi, ci, r->job, now);
}

/* --- membership (coop/state.py) --------------------------------------------------------- */

int hs_find_job(struct hs_view *v, int64_t key)
{
    if (key <= 0)
        return -1;
    for (int j = 0; j < v->njobs; j++)
        if (v->jobs[j].used == 1 && v->jobs[j].key == key)
            return j;
    return -1;
}

int hs_join_worker(struct hs_view *v, int job, int32_t pid, int32_t tid, int thread)
{
    if (job < 0 || job >= v->njobs || !v->jobs[job].used)
        return -1;
    for (int w = 0; w < v->nworkers; w++) {
        struct hs_worker *r = &v->workers[w];
        if (r->used != 0)
            continue;
        r->used = 1;
        r->pid = pid;
        r->job = job;
        hs_st(&r->state, HS_BLOCKED);
        r->cpu = -1;
        r->last_cpu = -1;
        r->seq = 0;
        r->held_ns = 0;
        r->tid = tid;
        r->pinned = -1;
        r->thread = thread ? 1 : 0;
        hs_st(&v->wake[w], 0);
        if (w >= v->h->hi)
            v->h->hi = w + 1;
        return w;
    }
    return -1;
}

int hs_reclaim(struct hs_view *v, int64_t now, hs_alive_fn alive, void *ctx, int32_t *woken, int max)
{
    int n = 0;
    int32_t got[HS_MAX_WOKEN];  /* one per dead or stopped holder, as many as a caller takes
                                   (`max`, at most this): beyond, a waiter finds its grant at
                                   its next poll */
    int ngot = 0;
    for (int w = 0; w < v->nworkers; w++) {
        struct hs_worker *r = &v->workers[w];
        if (r->used != 1)
            continue;
        int a = alive(ctx, r->pid, 0);
        if (a && r->thread)
            a = alive(ctx, r->pid, r->tid);
        int k = -1;
        if (!a) {
            k = hs_rule_leave_worker(v, w, now);
            v->h->reclaimed += 1;
        } else if (a == HS_STOPPED && r->cpu >= 0 && hs_ld(&r->state) == HS_RUNNING) {
            k = hs_rule_revoke_holder(v, w, now);  /* a thread queues again once continued */
            if (!r->thread && hs_ld(&r->state) == HS_BLOCKED)  /* (nudged); a Python */
                hs_st(&v->wake[w], HS_WAKE_REVOKED);  /* worker's waits see this */
            v->jobs[r->job].revoked += 1;
        }
        if (k >= 0 && ngot < (int)(sizeof got / sizeof got[0]))
            got[ngot++] = k;
    }
    for (int j = 0; j < v->njobs; j++) {
        if (v->jobs[j].used != 1)
            continue;
        int has = 0;
        for (int w = 0; w < v->nworkers && !has; w++)
            has = v->workers[w].used && v->workers[w].job == j;
        if (!has && !alive(ctx, v->jobs[j].pid, 0))
            v->jobs[j].used = 0;
    }
    for (int i = 0; i < ngot; i++)
        if (v->workers[got[i]].used && n < max)
            woken[n++] = got[i];
    return n;
}

/* --- the rules from outside (ctypes), on a segment of the caller's: the tests compare
   them with coop/rules.py byte for byte; the shim itself never calls these ---------------- */

HS_EXPORT int hs_layout_version(void)
{
    return HS_VERSION;
}

HS_EXPORT size_t hs_x_bind(struct hs_view *v, void *base, int ncpu, int njobs, int nworkers)
{
    return hs_view_init(v, base, ncpu, njobs, nworkers);
}

HS_EXPORT size_t hs_x_view_size(void)
{
    return sizeof(struct hs_view);
}

HS_EXPORT void hs_x_acquire(struct hs_view *v, int w, int64_t now, int *woken)
{
    hs_rule_acquire(v, w, now, woken);
}

HS_EXPORT int hs_x_try_acquire(struct hs_view *v, int w, int64_t now)
{
    return hs_rule_try_acquire(v, w, now);
}

HS_EXPORT int hs_x_release(struct hs_view *v, int w, int64_t now)
{
    return hs_rule_release(v, w, now);
}

HS_EXPORT int hs_x_lazy_park(struct hs_view *v, int w)
{
    return hs_rule_lazy_park(v, w);
}

HS_EXPORT int hs_x_lazy_resume(struct hs_view *v, int w)
{
    return hs_rule_lazy_resume(v, w);
}

HS_EXPORT int hs_x_expired(struct hs_view *v, int w, int64_t now)
{
    return hs_rule_expired(v, w, now);
}

HS_EXPORT void hs_x_boundary(struct hs_view *v, int w, int64_t now, int *woken)
{
    hs_rule_boundary(v, w, now, woken);
}

HS_EXPORT int hs_x_leave_worker(struct hs_view *v, int w, int64_t now)
{
    return hs_rule_leave_worker(v, w, now);
}

HS_EXPORT int hs_x_find_job(struct hs_view *v, int64_t key)
{
    return hs_find_job(v, key);
}

HS_EXPORT int hs_x_join_worker(struct hs_view *v, int job, int pid, int tid, int thread)
{
    return hs_join_worker(v, job, pid, tid, thread);
}

static int in_pairs(const int32_t *pairs, int n, int32_t pid, int32_t tid)
{
    for (int i = 0; i < n; i++)
        if (pairs[2 * i] == pid && pairs[2 * i + 1] == tid)
            return 1;
    return 0;
}

int hs_alive_unless_listed(void *ctx, int32_t pid, int32_t tid)
{
    const struct hs_listed *d = ctx;
    if (in_pairs(d->dead, d->ndead, pid, tid))
        return 0;
    return in_pairs(d->stopped, d->nstopped, pid, tid) ? HS_STOPPED : 1;
}

HS_EXPORT int hs_x_reclaim(struct hs_view *v, int64_t now, const int32_t *dead, int ndead,
                           const int32_t *stopped, int nstopped, int32_t *woken, int max)
{
    struct hs_listed d = {dead, stopped, ndead, nstopped};
    return hs_reclaim(v, now, hs_alive_unless_listed, &d, woken, max);
}
