"""stdio under the cooperative shim (coop/shim/wrap_stdio.c): a FILE fills and empties its
buffer by libc's internal read and write, which no wrapper sees, so a program blocked in
fread or fwrite on a pipe slept holding its token until the watchdog took it (counted as
`revoked`). One token on a private arbiter, so every wait is contended."""
from __future__ import annotations

import socket
import subprocess

import pytest

from hybridsched.coop.arbiter import Arbiter
from hybridsched.coop.shimjob import ShimJob
from hybridsched.oslayer.procfs import thread_state
from shimprogs import build
from shimrun import ONE, environ
from waiting import wait_until

QUANTUM_S = 0.005  # the watchdog's bound is two: a sleeping holder loses its token soon


def _sum(line: str) -> tuple[int, int]:
    words = line.split()
    return int(words[1]), int(words[3])


def _pipeline(exe: str, writer: str, reader: str, n: int, job: ShimJob):
    p = subprocess.run(["sh", "-c", f"{exe} {writer} {n} | {exe} {reader} {n}"],
                       env=environ(job), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    wrote = [line for line in p.stderr.splitlines() if line.startswith("wrote")]
    assert _sum(p.stdout) == _sum(wrote[0]) and _sum(p.stdout)[0] == n


def test_fread_and_fwrite_through_a_pipe_pass_every_byte_and_never_sleep_holding(
        seg, shim_lib, tmp_path):
    exe = build("stdio", tmp_path)
    with Arbiter(cpus=ONE, path=seg, quantum_s=QUANTUM_S) as a, ShimJob(a) as job:
        _pipeline(exe, "write", "read", 1_500_000, job)  # ~25 pipes full, each side waits
        counts = job.counters()
    # (a side asleep in libc's write or read holding the token is revoked: 30-80 times
    # before stdio was caught)
    assert counts.threads >= 2 and counts.revoked == 0, counts


@pytest.mark.parametrize("mode", ["lrecords", "flrecords"])
def test_threads_writing_records_to_a_line_buffered_stdout_never_sleep_holding(
        seg, shim_lib, tmp_path, mode):
    """Three threads fwrite 8193-byte lines to a line-buffered stdout: each call writes two
    pages and then its newline alone, a page left part full that no whole page joins, so
    the pipe's unread bytes filled more pages than they counted; the writers slept holding
    the token, revoked 26-35 times in a 0.3-0.4 s run (0.03 s now). `flrecords`: each
    record under the program's own flockfile, whose wait slept holding the token (revoked
    40-42 times, the review)."""
    exe = build("stdio", tmp_path)
    with Arbiter(cpus=ONE, path=seg, quantum_s=QUANTUM_S) as a, ShimJob(a) as job:
        _pipeline(exe, mode, "read", 3 * 8193 * 160, job)
        counts = job.counters()
    assert counts.revoked == 0, counts


def test_threads_writing_one_stdout_never_sleep_holding(seg, shim_lib, tmp_path):
    """Three threads fwrite short lines to one stdout, each flushing now and then: a waiter
    for the stream's lock made its whole call parked, and a write of the full buffer was
    taken for one that fit where short flushes had left the pipe's pages part full; the
    writers slept in write holding the token, 70-90 times in a 0.8 s run (0.06 s now)."""
    exe = build("stdio", tmp_path)
    with Arbiter(cpus=ONE, path=seg, quantum_s=QUANTUM_S) as a, ShimJob(a) as job:
        _pipeline(exe, "threads", "read", 63 * 20_000, job)
        counts = job.counters()
    assert counts.revoked == 0, counts


@pytest.mark.parametrize("mode", ["sfmt", "lsfmt"])
def test_long_formatted_lines_through_a_pipe_never_sleep_holding(seg, shim_lib, tmp_path, mode):
    """printf("%s\\n") of 8 KB lines, fully and line-buffered: a string's length is measured,
    not guessed (512 bytes), and a line-buffered stream's buffer is not taken for the one
    write it is on a fully buffered one (it writes the rest at the newline): the writer
    slept on the full pipe holding the token, revoked 16-31 times in a 0.5-1.4 s run
    against 0.03 s plain (the review's `pf` into md5sum). Here the line-buffered case
    fails on the shim before the fix; the fully buffered one, with this reader, did not."""
    exe = build("stdio", tmp_path)
    with Arbiter(cpus=ONE, path=seg, quantum_s=QUANTUM_S) as a, ShimJob(a) as job:
        _pipeline(exe, mode, "read", 8001 * 250, job)
        counts = job.counters()
    assert counts.revoked == 0, counts


def test_lines_and_characters_through_a_pipe_pass_every_byte(seg, shim_lib, tmp_path):
    """fgets, getline, getc, getchar and fputs, putc, fputc, putchar, puts, printf and
    fprintf, each way round with fread and fwrite. (A line longer than what has arrived may
    still sleep inside libc holding the token: the watchdog's to take; no count asserted.)"""
    exe = build("stdio", tmp_path)
    with Arbiter(cpus=ONE, path=seg, quantum_s=QUANTUM_S) as a, ShimJob(a) as job:
        for writer, reader in (("put", "lines"), ("write", "lines"), ("put", "read"),
                               ("fmt", "read")):
            _pipeline(exe, writer, reader, 300_000, job)


def _asleep(pid: int) -> bool:
    return thread_state(pid, pid) == "S"


def _said_ready(p: subprocess.Popen) -> None:
    assert p.stderr.readline() == b"ready\n"


def _while_asleep(seg, argv, what: str, finish, start=_said_ready, **popen):
    """``argv`` run as a job of a one-token arbiter; once ``start(p)`` has returned and it is
    asleep (``what``), a command of another job (``true``) needs the token, then
    ``finish(p)`` ends its input and output. (finish's result, the other command's status,
    ``argv``'s status, its job's counters)."""
    with Arbiter(cpus=ONE, path=seg, quantum_s=QUANTUM_S) as a, ShimJob(a) as job, \
            ShimJob(a) as other:
        p = subprocess.Popen(argv, env=environ(job), **popen)
        try:
            start(p)
            wait_until(lambda: _asleep(p.pid), what=what)
            done = subprocess.run(["true"], env=environ(other), timeout=120)
            result = finish(p)
            p.wait(timeout=120)
        finally:
            p.kill()
            p.wait()
        return result, done.returncode, p.returncode, job.counters()


PIPES = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_reader_waiting_in_fread_lets_another_job_have_the_token(seg, shim_lib, tmp_path):
    out, other, status, counts = _while_asleep(
        seg, [build("stdio", tmp_path), "read", "5"], "the reader asleep in fread",
        lambda p: p.communicate(b"hello", timeout=120)[0].decode(), **PIPES)
    assert other == 0 and status == 0
    assert out == f"read 5 sum {sum(b'hello')}\n"
    assert counts.revoked == 0, counts  # it had given its token up: nothing to take


@pytest.mark.parametrize("mode", ["write", "fmt", "lfmt", "dfmt", "dlong"])
def test_a_writer_waiting_on_a_full_pipe_lets_another_job_have_the_token(
        seg, shim_lib, tmp_path, mode):
    """fwrite; printf and fprintf (their length guessed, 512 bytes), on a line-buffered
    stream too, where the text may hold the newline that flushes it; dprintf (its length
    measured), of short pieces and of pieces longer than any guess."""
    n = 400_000  # several pipes full
    (out, err), other, status, counts = _while_asleep(
        seg, [build("stdio", tmp_path), mode, str(n)], "the writer asleep on the full pipe",
        lambda p: p.communicate(timeout=120), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert other == 0 and status == 0
    assert len(out) == n and f"sum {sum(out)}" in err.decode()
    assert counts.revoked == 0, counts


def test_a_line_reader_waiting_for_its_first_line_lets_another_job_have_the_token(
        seg, shim_lib, tmp_path):
    out, other, status, counts = _while_asleep(
        seg, [build("stdio", tmp_path), "lines", "6"], "the reader asleep before fgets",
        lambda p: p.communicate(b"hello\n", timeout=120)[0].decode(), **PIPES)
    assert other == 0 and status == 0
    assert out == "read 6 sum %d\n" % sum(b"hello\n")
    assert counts.revoked == 0, counts


def test_a_record_reader_waiting_for_its_records_end_lets_another_job_have_the_token(
        seg, shim_lib, tmp_path):
    """getdelim on NUL: a record begun in the buffer and not ended there waits parked."""
    def begin(p):
        _said_ready(p)
        p.stdin.write(b"a\0b")
        p.stdin.flush()

    out, other, status, counts = _while_asleep(
        seg, [build("stdio", tmp_path), "records", "8"], "the reader asleep in its second record",
        lambda p: p.communicate(b"b\0ccc\0", timeout=120)[0].decode(), start=begin, **PIPES)
    assert other == 0 and status == 0
    assert out == "read 9 sum %d\n" % sum(b"a\0bb\0ccc\0")  # whole records: 2 + 3 + 4
    assert counts.revoked == 0, counts


def test_a_large_fwrite_to_a_socket_its_peer_does_not_read_yet_waits_parked(
        seg, shim_lib, tmp_path):
    """poll calls a socket writable while it has some room, not a large write's worth."""
    n = 4_000_000
    mine, theirs = socket.socketpair()

    def drain(p) -> int:
        theirs.close()
        got = 0
        while chunk := mine.recv(1 << 16):
            got += len(chunk)
        return got

    with mine, theirs:
        got, other, status, counts = _while_asleep(
            seg, [build("stdio", tmp_path), "write", str(n)],
            "the writer asleep on the full socket", drain, stdout=theirs.fileno(),
            stderr=subprocess.PIPE)
    assert other == 0 and status == 0 and got == n
    assert counts.revoked == 0, counts


def test_a_write_larger_than_the_pipes_room_waits_parked(seg, shim_lib, tmp_path):
    """write() on a pipe poll calls writable (a page free) that cannot take it all: cat's
    128 KiB writes slept holding the token."""
    data = tmp_path / "data"
    data.write_bytes(b"x" * 3_000_000)
    first = []
    got, other, status, counts = _while_asleep(
        seg, ["cat", str(data)], "cat asleep on the full pipe",
        lambda p: len(first[0] + p.stdout.read()),
        start=lambda p: first.append(p.stdout.read(1)),  # it runs, and fills the pipe
        stdout=subprocess.PIPE)
    assert other == 0 and status == 0 and got == 3_000_000
    assert counts.revoked == 0, counts
