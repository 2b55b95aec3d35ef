/* Syscall User Dispatch (Linux >= 5.11, no privileges): the system calls a thread makes
   from outside libc's text raise SIGSYS, and the handler here emulates them. That is how
   the shim sees libgomp's futex waits, which are inline `syscall` instructions that no
   symbol interposition reaches. It is per thread, and inherited by neither pthread_create
   nor fork, so every thread arms it itself (hs_thread_begin). libc's own system calls,
   the shim's included, run natively; the selector byte lets a thread turn it off while it
   is in the handler. Also here: the signal the watchdog sends a holder that keeps its
   token past the bound while others wait (the shim's rotation), and keeping both signals
   the shim's when the program installs handlers or blocks signals. */
#include "coop.h"
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdlib.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#define PR_SYS_DISPATCH_OFF 0
#define PR_SYS_DISPATCH_ON 1
#endif
#ifndef SYS_USER_DISPATCH
#define SYS_USER_DISPATCH 2
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif

static uintptr_t libc_lo, libc_len;
static int sud_ok;
static struct sigaction app_sigsys, app_nudge;  /* what the program asked for */

/* the watchdog's rotation request: a real-time signal far from SIGRTMIN, which programs
   number theirs from; it is also hybridsched.coop.shimjob.NUDGE_SIGNAL */
int hs_nudge_signal(void)
{
    return SIGRTMAX - 7;
}

HS_EXPORT int hs_x_nudge_signal(void)
{
    return hs_nudge_signal();
}

int hs_own_signal(int sig)
{
    return (sig == SIGSYS && sud_ok) || sig == hs_nudge_signal();
}

/* neither of the shim's signals is ever blocked: SIGSYS blocked when a system call traps
   kills the process, and a holder that blocks the rotation signal would keep its token */
void hs_keep_unblocked(void *set)
{
    if (sud_ok)
        sigdelset((sigset_t *)set, SIGSYS);
    sigdelset((sigset_t *)set, hs_nudge_signal());
}

static int find_libc(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    uintptr_t target = (uintptr_t)data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (target >= lo && target < lo + ph->p_memsz) {
            libc_lo = lo;
            libc_len = ph->p_memsz;
            return 1;
        }
    }
    return 0;
}

/* A signal of the shim's number that is not the shim's: the program's handler, or its
   action. Left at its default, which ends the process for both numbers (SIGSYS with a
   core), the shim's handler gives way to it: a `kill -57` from outside ran on unseen. */
static void chain(struct sigaction *app, int sig, siginfo_t *si, void *ctx)
{
    if (app->sa_handler == SIG_IGN)
        return;
    if (app->sa_handler != SIG_DFL) {
        if (app->sa_flags & SA_SIGINFO)
            app->sa_sigaction(sig, si, ctx);
        else
            app->sa_handler(sig);
        return;
    }
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    hs_real_sigaction(sig, &dfl, NULL);
    raise(sig);  /* blocked in its handler: taken, by its default, as the handler returns */
}

#ifdef __x86_64__
/* rt_sigprocmask from outside libc: on the mask sigreturn restores, never blocking SIGSYS */
static long sigprocmask_on(ucontext_t *uc, long how, const uint64_t *set, uint64_t *old)
{
    uint64_t *mask = (uint64_t *)&uc->uc_sigmask;
    if (old)
        *old = *mask;
    if (set) {
        if (how == SIG_BLOCK)
            *mask |= *set;
        else if (how == SIG_UNBLOCK)
            *mask &= ~*set;
        else if (how == SIG_SETMASK)
            *mask = *set;
        else
            return -EINVAL;
        *mask &= ~(1ULL << (SIGSYS - 1));
    }
    return 0;
}

static void on_sigsys(int sig, siginfo_t *si, void *ctx)
{
    if (si->si_code != SYS_USER_DISPATCH) {
        chain(&app_sigsys, sig, si, ctx);
        return;
    }
    ucontext_t *uc = ctx;
    greg_t *g = uc->uc_mcontext.gregs;
    hs_t.selector = HS_SUD_ALLOW;  /* nothing the handler (or a handler nested in it) does traps */
    int saved = errno;
    long nr = g[REG_RAX], r;
    long a1 = g[REG_RDI], a2 = g[REG_RSI], a3 = g[REG_RDX], a4 = g[REG_R10], a5 = g[REG_R8],
         a6 = g[REG_R9];
    if (hs_on && hs_job >= 0)
        hs_count(HS_C_TRAPS);
    if (hs_on && hs_t.slot >= 0)
        hs_entered();
    switch (nr) {
    case SYS_rt_sigreturn:
    case SYS_clone:
    case SYS_clone3:
    case SYS_fork:
    case SYS_vfork:
        /* cannot run on a signal handler's behalf: run it natively (the instruction again,
           with the selector off); the thread is armed again at its next call through the shim */
        if (((unsigned char *)g[REG_RIP])[-2] == 0x0f && ((unsigned char *)g[REG_RIP])[-1] == 0x05) {
            g[REG_RIP] -= 2;
            g[REG_RAX] = nr;
            errno = saved;
            return;
        }
        r = -ENOSYS;
        break;
    case SYS_rt_sigprocmask:
        r = sigprocmask_on(uc, a1, (const uint64_t *)a2, (uint64_t *)a3);
        break;
    case SYS_futex:
        r = hs_futex(a1, a2, a3, a4, a5, a6);
        break;
    case SYS_rt_sigaction:
        hs_note_rt_sigaction(a1, a2);
        r = hs_raw(nr, a1, a2, a3, a4, a5, a6);
        break;
    default:
        r = hs_raw(nr, a1, a2, a3, a4, a5, a6);
    }
    g[REG_RAX] = r;
    errno = saved;
    if (hs_t.armed)
        hs_t.selector = HS_SUD_BLOCK;
}
#endif

static void on_nudge(int sig, siginfo_t *si, void *ctx)
{
    if (!hs_nudge_is_ours(si)) {
        chain(&app_nudge, sig, si, ctx);  /* the program's own use of the signal */
        return;
    }
    int saved = errno;
    int asked = si->si_code == SI_TKILL ? HS_PEND_NOW : HS_PEND_UNHELD;  /* SI_QUEUE: a sibling */
    if (hs_t.slot >= 0 && (hs_t.depth > 0 || (asked == HS_PEND_UNHELD && hs_t.spinning))) {
        if (hs_t.pending != HS_PEND_NOW)
            hs_t.pending = asked;  /* rotated as it leaves the shim, or its spinlocks */
    } else if (hs_t.slot >= 0) {
        hs_t.pending = HS_PEND_NONE;  /* answered now, a deferred request with it */
        char was = hs_t.selector;
        hs_t.selector = HS_SUD_ALLOW;
        hs_t.depth = 1;
        hs_count(HS_C_NUDGES);
        hs_rotate();
        hs_t.depth = 0;
        hs_t.selector = was;
    }
    errno = saved;
}

/* The shim's mask calls: libc's syscall(), which Syscall User Dispatch lets through, past
   the shim's own pthread_sigmask (which never blocks the shim's signals); whether the
   signal was blocked before */
static int nudge_mask(int how, int change)
{
    uint64_t bit = 1ULL << (hs_nudge_signal() - 1), old = 0;
    hs_real_syscall(SYS_rt_sigprocmask, how, change ? &bit : NULL, &old, sizeof bit);
    return (old & bit) != 0;
}

/* an exec'ing image's hold, found by hs_signals_setup and let go by hs_signals_start */
static int held_over_exec;

int hs_signals_setup(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_nudge;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    held_over_exec = nudge_mask(SIG_BLOCK, 0);  /* ignored and blocked: the hold */
    int r = hs_real_sigaction(hs_nudge_signal(), &sa, &app_nudge);
    if (held_over_exec && app_nudge.sa_handler == SIG_IGN)
        app_nudge.sa_handler = SIG_DFL;  /* what the program's own action came to at the exec */
    return r;
}

/* The hold let go once the thread has its slot again: a nudge kept pending meanwhile comes
   now and rotates it. Let go before, the nudge found no slot of the thread's and was lost,
   and the early look asks once per holding: a command's exec'd spinner kept its token to
   the watchdog's bound (7 of 40 runs of a test's scenario with its segment on disk, slower
   to map; 0 of 60 since). */
void hs_signals_start(void)
{
    if (held_over_exec)
        nudge_mask(SIG_UNBLOCK, 1);
    held_over_exec = 0;
}

/* Across an exec the nudge is ignored: the exec'ing thread keeps its token (its slot
   survives the exec), so the watchdog may nudge it while the kernel and the loader replace
   the program, when the signal's action is back at its default (an exec resets caught
   signals) and a real-time signal's default ends the process. SIG_IGN survives the exec and
   drops a nudge already pending; the new image's shim installs its handler again, and a
   program without the shim ignores a signal it never asked for.
   Unless the program ignored the signal itself, the hold blocks it too: the new image's
   shim reads "ignored and blocked" as the hold's, and the program's action as the default
   the exec gave it (a `kill -57` from outside then ends it, as without the shim; it went
   unseen when every exec'd image found the signal ignored), and "ignored" alone as the
   program's own, which an exec keeps. */
static struct sigaction shim_nudge;
static __thread int hold_blocked;  /* this thread's hold blocked the signal */

void hs_nudge_hold(void)
{
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    hs_real_sigaction(hs_nudge_signal(), &ign, &shim_nudge);
    hold_blocked = app_nudge.sa_handler != SIG_IGN && !nudge_mask(SIG_BLOCK, 1);
}

void hs_nudge_resume(void)  /* the exec failed: the shim's handler again */
{
    if (hold_blocked)
        nudge_mask(SIG_UNBLOCK, 1);
    hold_blocked = 0;
    hs_real_sigaction(hs_nudge_signal(), &shim_nudge, NULL);
}

/* valgrind runs the program on its own synthetic CPU in the same threads: armed there, the
   dispatch trapped valgrind's own system calls too, and it died of SIGSYS (the review).
   Its preload names it (vgpreload_core in LD_PRELOAD). Without the traps, waits made by a
   raw futex instruction (libgomp's) go unseen: said once a process. */
static int under_valgrind(void)
{
    const char *pre = getenv("LD_PRELOAD");
    if (!pre || !strstr(pre, "vgpreload_core"))
        return 0;
    static const char line[] = "hybridsched coop shim: under valgrind, without Syscall User "
                               "Dispatch: waits by a raw futex instruction (libgomp's) are not "
                               "seen, a thread asleep in one keeps its token until the "
                               "watchdog takes it\n";
    if (write(2, line, sizeof line - 1) < 0) {
        /* nowhere to say it */
    }
    return 1;
}

int hs_sud_setup(void)
{
#ifdef __x86_64__
    const char *off = getenv("HYBRIDSCHED_COOP_SUD");
    if ((off && strcmp(off, "0") == 0) || under_valgrind())
        return 0;
    dl_iterate_phdr(find_libc, (void *)hs_real_syscall);  /* libc's syscall() lies in its text */
    if (!libc_len)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigsys;
    /* NODEFER: a trap in a program's handler nested in ours re-enters (and passes through) */
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, hs_nudge_signal());
    if (hs_real_sigaction(SIGSYS, &sa, &app_sigsys) != 0)
        return 0;
    sud_ok = 1;
#endif
    return sud_ok;
}

void hs_sud_arm(void)
{
    if (!sud_ok)
        return;
    hs_t.selector = HS_SUD_ALLOW;
    if (prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, libc_lo, libc_len,
              (unsigned long)&hs_t.selector) == 0) {
        hs_t.armed = 1;
        hs_t.selector = HS_SUD_BLOCK;
    }
}

void hs_sud_disarm(void)
{
    if (!hs_t.armed)
        return;
    hs_t.selector = HS_SUD_ALLOW;
    prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0);
    hs_t.armed = 0;
}

/* sigaction for the shim's own signals: recorded (the program's handler is chained for
   signals that are not the shim's), never installed over the shim's */
int hs_app_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    struct sigaction *app = sig == SIGSYS ? &app_sigsys : &app_nudge;
    if (old)
        *old = *app;
    if (act)
        *app = *act;
    return 0;
}
