"""Plain Python threads, one per CPU this process may use, as an unmodified threaded script
would run: ROUNDS rounds, each hashing KIB KiB in all, shared out among the threads
(hashlib releases the GIL on large buffers, so they hash in parallel), with a
threading.Barrier between rounds. The work does not depend on the thread count.

    python py_threads.py ROUNDS KIB

It checks itself: every part's digest chain must equal a serial recomputation of one; it
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


PARTS = 16  # parts per round: an equal share for any thread count dividing 16


def main() -> int:
    if len(sys.argv) != 3:
        print(f"usage: {sys.argv[0]} ROUNDS KIB", file=sys.stderr)
        return 2
    rounds, kib = int(sys.argv[1]), int(sys.argv[2])
    threads = len(os.sched_getaffinity(0))
    buf = bytes(range(256)) * max(1, kib * 4 // PARTS)
    barrier = threading.Barrier(threads)
    out = [b""] * PARTS

    def body(t: int) -> None:
        mine = range(t, PARTS, threads)
        hs = {p: p.to_bytes(8, "little") for p in mine}
        for _ in range(rounds):
            for p in mine:
                hs[p] = hashlib.sha256(hs[p] + buf).digest()
            barrier.wait()
        for p in mine:
            out[p] = hs[p]

    team = [threading.Thread(target=body, args=(t,)) for t in range(threads)]
    for th in team:
        th.start()
    for th in team:
        th.join()
    ok = out[-1] == chain(PARTS - 1, rounds, buf) and all(out)
    print(f"py_threads threads={threads} rounds={rounds} kib={kib} {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
