"""The measured facts that study files before format version 4 kept only in a run's free-text
``notes``: which chunk loop ran and pipe-MtoM's producer CPU. Read here, once, when such a
file's rows are brought to today's layout (:func:`format.conform`); a file of version 4 or
later has them as fields and its notes are never read by code. This is the one module that
looks inside notes (tests/store/test_typed_facts.py holds every other one to that), and the
words it looks for are frozen: they are what those hybridsched versions wrote.
"""
from __future__ import annotations

import numpy as np

from ..records import NOT_MEASURED

# What the thread backend's compiled loop added to a run's notes (none: the Python loop)
OLD_COMPILED_NOTE = "dispatch=compiled"
# What pipe-MtoM's producer added: its CPU seconds, "%.6f", up to the next ';'
OLD_PRODUCER_CPU_NOTE = "producer cpu_s="


def _text(note) -> str:
    return note.decode("utf-8", "ignore") if isinstance(note, bytes) else str(note)


def old_dispatch(note) -> str:
    """"compiled" where an old run's notes say the compiled loop ran; "" otherwise (those
    files did not say "python": a thread run without the note, or a run of no thread loop)."""
    return "compiled" if OLD_COMPILED_NOTE in _text(note) else ""


def old_producer_cpu(note) -> float:
    """The producer CPU seconds an old pipe-MtoM run's notes hold; NOT_MEASURED where none."""
    text = _text(note)
    at = text.find(OLD_PRODUCER_CPU_NOTE)
    if at < 0:
        return NOT_MEASURED
    try:
        return float(text[at + len(OLD_PRODUCER_CPU_NOTE):].split(";")[0].split()[0])
    except (ValueError, IndexError):
        return NOT_MEASURED


def _column(fn, dtype):
    def of(notes: np.ndarray) -> np.ndarray:
        return np.array([fn(n) for n in notes.tolist()], dtype)
    return of


# /runs field -> its values, from the stored notes column, for rows without the field
FROM_NOTES = {"dispatch": _column(lambda n: old_dispatch(n).encode(), "S8"),
              "producer_cpu_s": _column(old_producer_cpu, "f8")}
