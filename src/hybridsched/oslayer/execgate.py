"""The start gate's waiter for one unmodified command: a program of its own, run as
``python -S -s execgate.py`` with colocate's own environment, importing nothing of ours.

It reads what to run from fd 5 (a memfd: job number, path, argument count, the arguments,
then the command's environment as "NAME=value" entries, NUL-separated), says it is ready on
fd 4 with the CPU time and involuntary context switches its own start-up took (the job's
are counted from there, since wait4 counts a process's whole life), and waits on fd 3 for
its byte of the gate. With it, it execs the command with nothing else open; at end of file
instead (colocate died before opening the gate, and with it the pipe's writing end) it
exits without running the command.

Why not exec straight from the child forked off colocate: that child holds a copy of
colocate's address space (numpy, numba, h5py: ~100-200 MB), and execve tears it down
before the new program runs. From the gate to the command's exec took 2.5 ms (partition),
2.9 (env) and 3.8 (coop, whose arbiter loads numba's functions) in colocate runs, counted
in every job's time; a forked process of 107 MB took 1.4 ms longer to run /bin/true than
one of 10 MB. This waiter, ~10 MB, pays its own start-up (~10 ms) before the gate instead.

What to run comes in a memfd, not in argv: every user may read a process's argv
(/proc/PID/cmdline), and argv and the environment share one limit (ARG_MAX). The waiter
runs in colocate's environment, not the command's: that one may preload the coop shim, and
colocate's is one this interpreter is known to start in (LD_LIBRARY_PATH, PYTHONHOME).
"""
import sys

if __name__ == "__main__":  # run as the waiter: nothing of this file's folder is imported
    del sys.path[0]  # (-I would do it, and drop PYTHONHOME too)

import os  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import struct  # noqa: E402

GATE_FD = 3
READY_FD = 4
SPEC_FD = 5
READY = struct.Struct("=qdq")  # job, CPU seconds, involuntary context switches
OPEN = b"g"  # one byte for each waiter: the gate is open
# what CPython changes at start-up and execve keeps (an ignored signal stays ignored), and
# SIGINT, whose KeyboardInterrupt would end this waiter with a traceback instead of as the
# command would
_DEFAULTS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT)


def encode(job: int, path: str, argv, env: dict) -> bytes:
    """What to run, as :func:`spec` reads it back (colocate writes it to fd 5)."""
    return b"\0".join([str(job).encode(), os.fsencode(path), str(len(argv)).encode(),
                       *map(os.fsencode, argv),
                       *(os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items())])


def spec(data: bytes) -> tuple:
    """(job, path, argv, env) from the NUL-separated fields of fd 5 (:func:`encode`)."""
    job, path, count, *rest = data.split(b"\0")
    n = int(count)
    return int(job), path, rest[:n], dict(e.split(b"=", 1) for e in rest[n:])


def _read_all(fd: int) -> bytes:
    chunks: list = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def main() -> None:
    job, path, args, env = spec(_read_all(SPEC_FD))
    os.close(SPEC_FD)
    for sig in _DEFAULTS:
        signal.signal(sig, signal.SIG_DFL)
    use = resource.getrusage(resource.RUSAGE_SELF)
    os.write(READY_FD, READY.pack(job, use.ru_utime + use.ru_stime, use.ru_nivcsw))
    os.close(READY_FD)
    if os.read(GATE_FD, 1) != OPEN:
        os._exit(127)  # the gate never opened: the command does not run
    os.close(GATE_FD)
    try:
        os.execve(path, args, env)
    except (OSError, ValueError) as exc:
        name = os.fsdecode(args[0] if args else path)
        os.write(2, f"hybridsched colocate: cannot start {name}: {exc}\n".encode())
    os._exit(127)


if __name__ == "__main__":
    main()
