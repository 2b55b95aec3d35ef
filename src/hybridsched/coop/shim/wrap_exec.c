/* The interposed libc functions, part 4: exec. The exec'ing thread keeps its token and
   its slot through the exec (members.c, main_thread_begin); what must not go through is a
   rotation request, so the nudge signal is ignored from just before the exec until the new
   image's shim takes it again (sud.c, hs_nudge_hold). glibc's exec functions call its
   internal execve, which cannot be interposed: each is wrapped. */
#include "wrap.h"

#include <spawn.h>

REAL(int, execve, (const char *, char *const[], char *const[]));
REAL(int, execv, (const char *, char *const[]));
REAL(int, execvp, (const char *, char *const[]));
REAL(int, execvpe, (const char *, char *const[], char *const[]));
REAL(int, fexecve, (int, char *const[], char *const[]));

/* the call, with the nudge held and the program's own mask; only a failed exec returns */
#define HELD(call)                                                                            \
    ({                                                                                        \
        if (hs_on) {                                                                          \
            hs_nudge_hold();                                                                  \
            hs_exec_affinity(1);                                                              \
        }                                                                                     \
        int r_ = (call);                                                                      \
        int e_ = errno;                                                                       \
        if (hs_on) {                                                                          \
            hs_exec_affinity(0);                                                              \
            hs_nudge_resume();                                                                \
        }                                                                                     \
        errno = e_;                                                                           \
        r_;                                                                                   \
    })

HS_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    return HELD(R(execve)(path, argv, envp));
}

HS_EXPORT int execv(const char *path, char *const argv[])
{
    return HELD(R(execv)(path, argv));
}

HS_EXPORT int execvp(const char *file, char *const argv[])
{
    return HELD(R(execvp)(file, argv));
}

HS_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    return HELD(R(execvpe)(file, argv, envp));
}

HS_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    return HELD(R(fexecve)(fd, argv, envp));
}

/* execl, execlp, execle: the list made a vector, then the vector's function above */
#define VECTOR(first, argv)                                                                   \
    size_t n_ = 1;                                                                            \
    va_list ap_;                                                                              \
    va_start(ap_, first);                                                                     \
    while (va_arg(ap_, const char *))                                                         \
        n_++;                                                                                 \
    va_end(ap_);                                                                              \
    const char *argv[n_ + 1];                                                                 \
    argv[0] = first;                                                                          \
    va_start(ap_, first);                                                                     \
    for (size_t i_ = 1; i_ <= n_; i_++)                                                       \
        argv[i_] = va_arg(ap_, const char *);

HS_EXPORT int execl(const char *path, const char *arg, ...)
{
    VECTOR(arg, argv)
    va_end(ap_);
    return execv(path, (char *const *)argv);
}

HS_EXPORT int execlp(const char *file, const char *arg, ...)
{
    VECTOR(arg, argv)
    va_end(ap_);
    return execvp(file, (char *const *)argv);
}

HS_EXPORT int execle(const char *path, const char *arg, ...)
{
    VECTOR(arg, argv)
    char *const *envp = va_arg(ap_, char *const *);
    va_end(ap_);
    return execve(path, (char *const *)argv, envp);
}

/* posix_spawn execs inside glibc, where the wrappers above never see it: the calling thread
   takes the program's own mask for the call (the child starts with its caller's), then is
   pinned back. The child is a new process of the job, registered by its own shim. */
REAL(int, posix_spawn, (pid_t *, const char *, const posix_spawn_file_actions_t *,
                        const posix_spawnattr_t *, char *const[], char *const[]));
REAL(int, posix_spawnp, (pid_t *, const char *, const posix_spawn_file_actions_t *,
                         const posix_spawnattr_t *, char *const[], char *const[]));

#define SPAWNED(call)                                                                         \
    ({                                                                                        \
        if (hs_on)                                                                            \
            hs_exec_affinity(1);                                                              \
        int r_ = (call);                                                                      \
        if (hs_on)                                                                            \
            hs_exec_affinity(0);                                                              \
        r_;                                                                                   \
    })

HS_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                          const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    return SPAWNED(R(posix_spawn)(pid, path, fa, attr, argv, envp));
}

HS_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                           const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    return SPAWNED(R(posix_spawnp)(pid, file, fa, attr, argv, envp));
}
