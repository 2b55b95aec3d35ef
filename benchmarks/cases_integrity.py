"""Issue 9's hostile and unlucky cases, each run once through the CLI; one line per case.

    PYTHONPATH=src python benchmarks/cases_integrity.py       # this tree
    PYTHONPATH=/old/src python benchmarks/cases_integrity.py  # another version, for a table

Needs root for the tmpfs, /dev/shm and other-user cases (they say "skipped" otherwise).
Does not import hybridsched itself except where a case needs to (so an old tree works).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

HS = [sys.executable, "-m", "hybridsched"]
TINY = ["-s", "serial,dynamic", "-k", "2", "-L", "4", "--height", "8", "--width", "8"]
SLOW = ["-s", "serial,dynamic", "-k", "2", "-L", "8", "--height", "16", "--width", "64"]


def hs(*argv, timeout=120, **kw):
    try:
        return subprocess.run([*HS, *argv], capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired:
        return None


def outcome(p) -> str:
    if p is None:
        return "still running at the timeout, killed"
    err = p.stderr.strip().splitlines()
    tb = "Traceback" in p.stderr
    last = err[-1][:110] if err else ""
    return f"rc {p.returncode}, {len(err)} stderr line(s){', TRACEBACK' if tb else ''}: {last!r}"


def nruns(path) -> str:
    code = "import sys,h5py; f=h5py.File(sys.argv[1],'r',locking=False); print(len(f['runs']))"
    p = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else "unreadable"


def writer(path, reps=3000, *extra):
    w = subprocess.Popen([*HS, "run", *SLOW, "--reps", str(reps), "--out", path, *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and w.poll() is None:
        n = nruns(path) if os.path.exists(path) else "0"
        if n.isdigit() and int(n) >= 20:
            break
        time.sleep(0.1)
    return w


def stop(w) -> str:
    if w.poll() is None:
        w.send_signal(signal.SIGINT)
    err = w.communicate(timeout=60)[1].strip().splitlines()
    return f"first writer rc {w.returncode} {err[-1][:80]!r}" if err else f"first writer rc {w.returncode}"


def case_second_writer(d, how):
    live = os.path.join(d, f"live-{how}.h5")
    w = writer(live)
    before = nruns(live)
    if how == "merge":
        other = os.path.join(d, "other.h5")
        hs("run", *SLOW, "--reps", "1", "--out", other)
        p = hs("merge", other, "-o", live, "--overwrite")
    else:
        p = hs("run", *TINY, "--reps", "1", "--out", live, *(["--overwrite"] if how == "overwrite" else []))
    right_after = nruns(live)
    first = stop(w)
    return (f"second: {outcome(p)}; runs before {before}, right after {right_after}, "
            f"at end {nruns(live)}; {first}")


def case_two_plain(d):
    out = os.path.join(d, "same.h5")
    a = subprocess.Popen([*HS, "run", *SLOW, "--reps", "20", "--out", out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    b = subprocess.Popen([*HS, "run", *SLOW, "--reps", "20", "--out", out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ea, eb = a.communicate(timeout=300)[1], b.communicate(timeout=300)[1]
    lines = lambda e: (e.strip().splitlines() or [""])[-1][:70]  # noqa: E731
    return (f"rc {a.returncode}/{b.returncode} ({lines(ea)!r} / {lines(eb)!r}); "
            f"runs in file {nruns(out)} (one study is 40)")


def case_live_report(d, n=30):
    live = os.path.join(d, "lr.h5")
    w = writer(live)
    bad = []
    for _ in range(n):
        p = hs("report", live, "--no-plots", "--out-dir", os.path.join(d, "lr_rep"))
        if p.returncode != 0:
            bad.append((p.stderr.strip().splitlines() or ["?"])[-1][:60])
    code = textwrap.dedent("""
        import sys, h5py
        bad = 0
        for i in range(200):
            try:
                with h5py.File(sys.argv[1], "r") as f:
                    f["runs"][()]
            except Exception:
                bad += 1
        print(bad)
    """)
    plain = subprocess.run([sys.executable, "-c", code, live], capture_output=True, text=True)
    stop(w)
    return (f"report failed {len(bad)} of {n}" + (f" (e.g. {bad[0]!r})" if bad else "")
            + f"; plain h5py reader failed {plain.stdout.strip()} of 200 opens")


def case_full_disk(d):
    m = os.path.join(d, "tiny")
    os.makedirs(m)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", m]).returncode:
        return "skipped (cannot mount tmpfs)"
    try:
        out = os.path.join(m, "full.h5")
        argv = ["run", "-s", "dynamic", "-k", "2", "-L", "3000", "--height", "1", "--width", "4",
                "--reps", "400", "--chunk", "1", "--out", out]
        p = hs(*argv, timeout=300)
        r = hs("report", out, "--no-plots", "--out-dir", os.path.join(d, "fd_rep"))
        subprocess.run(["mount", "-o", "remount,size=64m", m])
        res = hs(*argv, "--resume", timeout=300)
        return (f"run: {outcome(p)}; report after: {outcome(r)}; "
                f"--resume: {outcome(res)}, runs {nruns(out)} of 400")
    finally:
        subprocess.run(["umount", "-l", m])


def case_symlinks(d):
    victim = os.path.join(d, "victim")
    intact = lambda: open(victim, "rb").read() == b"precious"  # noqa: E731
    with open(victim, "w") as fh:
        fh.write("precious")
    src = os.path.join(d, "src.h5")
    hs("run", *TINY, "--reps", "1", "--out", src)
    out = os.path.join(d, "m.h5")
    os.symlink(victim, out + ".part")
    p = hs("merge", src, "-o", out)
    part = f"merge with planted .part: {outcome(p)}; victim {'INTACT' if intact() else 'OVERWRITTEN'}"
    with open(victim, "w") as fh:
        fh.write("precious")
    sub = os.path.join(d, "default")
    os.makedirs(sub)
    now = time.time()
    dangling = os.path.join(d, "made-through-the-link")  # a link to a file not there yet
    for s in range(0, 12):
        os.symlink(dangling, os.path.join(sub, time.strftime("hybridsched-%Y%m%d-%H%M%S.h5",
                                                             time.localtime(now + s))))
    p = hs("run", *TINY, "--reps", "1", cwd=sub)
    dflt = (f"run to a planted (dangling) default name: {outcome(p)}; link target "
            f"{'WRITTEN' if os.path.exists(dangling) else 'not created'}")
    target = os.path.join(d, "elsewhere")
    os.makedirs(target)
    os.symlink(target, os.path.join(d, "src_report"))
    p = hs("report", src)
    rep = f"report with planted <stem>_report: {outcome(p)}; {len(os.listdir(target))} files written into the link's target"
    return f"{part} | {dflt} | {rep}"


def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _ns():
    return os.stat("/proc/self/ns/pid").st_ino


def case_sweep(d):
    dead = _dead_pid()
    names = [f"hybridsched.{dead}.0.orig", f"hybridsched.{dead}.{_ns()}.0.orig"]
    for n in names:
        with open(f"/dev/shm/{n}", "wb") as fh:
            fh.write(b"x")
    # the sweep that every Slab starts with, as user nobody (modules imported first: the
    # virtualenv is not readable by nobody here)
    code = ("import os, psutil, posix_ipc; import hybridsched.oslayer.shm as w; "
            "os.seteuid(65534); w.sweep_orphans(); print('ok')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    user = f"sweep as a non-root user with another user's orphans: {outcome(p)}"
    for n in names:
        if os.path.exists(f"/dev/shm/{n}"):
            os.unlink(f"/dev/shm/{n}")
    dirs = [f"/dev/shm/hybridsched.{dead}.1.orig", f"/dev/shm/hybridsched.{dead}.{_ns()}.1.orig"]
    for x in dirs:
        os.mkdir(x)
    p = hs("run", *TINY, "--reps", "1", "--out", os.path.join(d, "sw.h5"))
    for x in dirs:
        os.rmdir(x)
    dirc = f"root run with a directory of our name: {outcome(p)}"
    # a live run in another pid namespace: its pid is dead here; in the new format its
    # namespace inode differs from ours
    other = [f"hybridsched.{dead}.7.orig", f"hybridsched.{dead}.{_ns() + 1}.7.orig"]
    for n in other:
        with open(f"/dev/shm/{n}", "wb") as fh:
            fh.write(b"x")
    hs("run", *TINY, "--reps", "1", "--out", os.path.join(d, "sw2.h5"))
    kept = [n for n in other if os.path.exists(f"/dev/shm/{n}")]
    for n in kept:
        os.unlink(f"/dev/shm/{n}")
    return f"{user} | {dirc} | other-namespace entries kept: {len(kept)} of 2 forms"


def case_width(d):
    t0 = time.monotonic()
    out = os.path.join(d, "w.h5")
    p = hs("run", "-s", "serial", "-L", "1", "--height", "1", "--width", "2147483648",
           "--reps", "1", "--out", out, timeout=200)
    return f"{outcome(p)} after {time.monotonic() - t0:.1f} s; file {'exists: runs ' + nruns(out) if os.path.exists(out) else 'not created'}"


def case_shm_full(d):
    # a private 64 MB /dev/shm; the study needs 52 MB, so the size check passes; a second
    # process fills 40 MB of it as soon as our first segment appears (after the check)
    fill = ("while ! ls /dev/shm/hybridsched.* >/dev/null 2>&1; do :; done; "
            "dd if=/dev/zero of=/dev/shm/filler bs=1M count=40 2>/dev/null")
    code = ("mount -t tmpfs -o size=64m tmpfs /dev/shm && (" + fill + ") & sleep 0.2; " +
            " ".join(HS) + " run -s serial -L 100 --height 256 --width 1024 --reps 1 --out " +
            os.path.join(d, "shm.h5") + "; echo rc=$? >&2; wait")
    p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", code],
                       capture_output=True, text=True, timeout=120)
    rc = [ln for ln in p.stderr.splitlines() if ln.startswith("rc=")]
    lines = [ln for ln in p.stderr.splitlines() if not ln.startswith("rc=") and ln.strip()]
    code_ = int(rc[-1][3:]) if rc else None
    sig = f" (= signal {code_ - 128})" if code_ and code_ > 128 else ""
    return (f"{rc[-1] if rc else 'rc ?'}{sig}, {len(lines)} stderr line(s)"
            f"{', TRACEBACK' if 'Traceback' in p.stderr else ''}: {lines[-1][:100] if lines else ''!r}")


def case_plan():
    t0 = time.monotonic()
    p = subprocess.run(["sh", "-c", "ulimit -v 4000000; exec " + " ".join(HS) +
                        " plan --policy static --tasks 10 --workers 1000000000000"],
                       capture_output=True, text=True, timeout=60)
    return f"{outcome(p)} after {time.monotonic() - t0:.1f} s (memory capped at 4 GB)"


def case_crafted(d):
    import h5py
    import numpy as np

    base = os.path.join(d, "base.h5")
    hs("run", *TINY, "--reps", "1", "--out", base)
    results = []

    def craft(name, fn):
        path = os.path.join(d, f"crafted-{name}.h5")
        shutil.copy(base, path)
        with h5py.File(path, "a") as h5:
            fn(h5)
        outs = []
        for cmd in (["report", path, "--no-plots"], ["fit", path], ["merge", path, "-o", path + ".m.h5"],
                    ["run", *TINY, "--reps", "1", "--resume", "--out", path]):
            p = hs(*cmd)
            outs.append(f"{cmd[0]} rc {p.returncode}{' TB' if 'Traceback' in p.stderr else ''}")
        results.append(f"{name}: " + ", ".join(outs))

    def rows(fn):
        def f(h5):
            r = h5["runs"][()]
            fn(r)
            h5["runs"][...] = r
        return f
    craft("utf8", rows(lambda r: r["scheduler"].__setitem__(1, b"d\xff\xfe")))
    craft("inf", rows(lambda r: r["time_s"].__setitem__(1, np.inf)))
    craft("P0", rows(lambda r: r["P"].__setitem__(1, 0)))
    craft("nodetail", lambda h5: h5.__delitem__("detail"))

    def other(h5):
        del h5["runs"]
        h5["runs"] = np.arange(3)
    craft("runs-int", other)
    craft("study-notjson", lambda h5: h5.attrs.__setitem__("study", "{x"))
    return " | ".join(results)


def case_misc(d):
    sub = os.path.join(d, "empty")
    os.makedirs(sub)
    p = hs("run", *TINY, "--reps", "1", "--out", "", cwd=sub)
    empty = f"--out '': {outcome(p)}; files made {os.listdir(sub)}"
    p = hs("run", *TINY, "--reps", "1", "--out", "/dev/null", "--overwrite")
    null = f"--out /dev/null --overwrite: {outcome(p)}"
    env = dict(os.environ, HYBRIDSCHED_FAULT="x:y")
    out = os.path.join(d, "fault.h5")
    p = hs("run", "-s", "serial,prolific", "-k", "2", "-L", "4", "--height", "8", "--width", "8",
           "--reps", "1", "--out", out, env=env)
    fault = f"HYBRIDSCHED_FAULT=x:y: {outcome(p)}; file {'made, runs ' + nruns(out) if os.path.exists(out) else 'not made'}"
    return f"{empty} | {null} | {fault}"


CASES = {
    "run --overwrite during a live run": lambda d: case_second_writer(d, "overwrite"),
    "plain run to a live study": lambda d: case_second_writer(d, "plain"),
    "merge -o live --overwrite": lambda d: case_second_writer(d, "merge"),
    "two plain runs started together": case_two_plain,
    "report loop / plain reader on a live study": case_live_report,
    "full disk (2 MB tmpfs)": case_full_disk,
    "planted symlinks": case_symlinks,
    "orphan sweep": case_sweep,
    "--width 2147483648": case_width,
    "/dev/shm filled by another process after the size check (private 64 MB)": case_shm_full,
    "plan --workers 10**12": lambda d: case_plan(),
    "crafted studies": case_crafted,
    "--out '' / devices / fault hook": case_misc,
}


def main() -> None:
    only = sys.argv[1:]
    for name, fn in CASES.items():
        if only and not any(o in name for o in only):
            continue
        d = tempfile.mkdtemp(prefix="cases-")
        try:
            t0 = time.monotonic()
            res = fn(d)
        except Exception as exc:  # noqa: BLE001 - a case that breaks the harness is an outcome too
            res = f"harness error {exc!r}"
        finally:
            shutil.rmtree(d, ignore_errors=True)
        print(f"{name}: {res} [{time.monotonic() - t0:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
