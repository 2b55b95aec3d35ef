"""Plain Python threads, one per CPU this process may use: each hashes its own buffer in
rounds (hashlib releases the GIL on large buffers, so the threads run in parallel), with a
threading.Barrier between rounds, as an unmodified threaded script would run.

    python py_threads.py ROUNDS KIB

It checks itself: every thread's digest chain must equal a serial recomputation of one; it
prints "ok" and exits 0 only then.
"""
import hashlib
import os
import sys
import threading


def chain(seed: int, rounds: int, buf: bytes) -> bytes:
    h = seed.to_bytes(8, "little")
    for _ in range(rounds):
        h = hashlib.sha256(h + buf).digest()
    return h


def main() -> int:
    if len(sys.argv) != 3:
        print(f"usage: {sys.argv[0]} ROUNDS KIB", file=sys.stderr)
        return 2
    rounds, kib = int(sys.argv[1]), int(sys.argv[2])
    threads = len(os.sched_getaffinity(0))
    buf = bytes(range(256)) * (kib * 4)
    barrier = threading.Barrier(threads)
    out = [b""] * threads

    def body(t: int) -> None:
        h = t.to_bytes(8, "little")
        for _ in range(rounds):
            h = hashlib.sha256(h + buf).digest()
            barrier.wait()
        out[t] = h

    team = [threading.Thread(target=body, args=(t,)) for t in range(threads)]
    for th in team:
        th.start()
    for th in team:
        th.join()
    ok = out[-1] == chain(threads - 1, rounds, buf)
    print(f"py_threads threads={threads} rounds={rounds} kib={kib} {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
