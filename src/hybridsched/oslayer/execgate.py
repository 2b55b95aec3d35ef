"""The start gate's waiter for one unmodified command: a program of its own, run as
``python -I -S execgate.py PATH ARGC ARG... ENV...`` with an empty environment, importing
nothing of ours. It says it is ready on fd 4, with the CPU time and involuntary context
switches its own start-up took (READY: the job's are counted from there, since wait4
counts a process's whole life), waits on fd 3 until the gate opens (the other end of the
pipe is closed), then execs PATH with the ARGs and the ENV entries ("NAME=value") and
nothing else open.

Why not exec straight from the child forked off colocate: that child holds a copy of
colocate's address space (numpy, numba, h5py: ~100-200 MB), and execve tears it down
before the new program runs. From the gate to the command's exec took 2.5 ms (partition),
2.9 (env) and 3.8 (coop, whose arbiter loads numba's functions) in colocate runs, counted
in every job's time; a forked process of 107 MB took 1.4 ms longer to run /bin/true than
one of 10 MB. This waiter, ~10 MB, pays its own start-up (~9 ms) before the gate instead.

The environment comes in argv, not in its own: the waiter must run without the command's
LD_PRELOAD (the coop shim), LD_LIBRARY_PATH or PYTHON* settings.
"""
import os
import resource
import signal
import struct
import sys

GATE_FD = 3
READY_FD = 4
READY = struct.Struct("=dq")  # CPU seconds, involuntary context switches
# what CPython changes at start-up and execve keeps (an ignored signal stays ignored), and
# SIGINT, whose KeyboardInterrupt would end this waiter with a traceback instead of as the
# command would
_DEFAULTS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT)


def main(argv: list) -> None:
    path, count = os.fsencode(argv[1]), int(argv[2])
    args = [os.fsencode(a) for a in argv[3:3 + count]]
    env = dict(os.fsencode(e).split(b"=", 1) for e in argv[3 + count:])
    for sig in _DEFAULTS:
        signal.signal(sig, signal.SIG_DFL)
    use = resource.getrusage(resource.RUSAGE_SELF)
    os.write(READY_FD, READY.pack(use.ru_utime + use.ru_stime, use.ru_nivcsw))
    os.close(READY_FD)
    while os.read(GATE_FD, 1):  # nothing is written: end of file is the gate opening
        pass
    os.close(GATE_FD)
    try:
        os.execve(path, args, env)
    except OSError as exc:
        os.write(2, f"hybridsched colocate: cannot start {argv[3]}: {exc}\n".encode())
    os._exit(127)


if __name__ == "__main__":
    main(sys.argv)
