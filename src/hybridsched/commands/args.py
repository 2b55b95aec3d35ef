"""Argument types shared by every subcommand: one-line errors, bounded integers, lists."""
from __future__ import annotations

import argparse
from typing import NoReturn

from ..errors import UsageError

PROG = "hybridsched"  # the command's name, first in every line it prints


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's default in its help: appended as "(default: X)" unless the help already
    says it; flags read "(default: off)". Descriptions and epilogs keep their line breaks
    (the examples)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if not action.option_strings or "default" in text or action.default is argparse.SUPPRESS:
            return text
        if isinstance(action, argparse._StoreTrueAction):
            return text + " (default: off)"
        if action.default is None:
            return text  # the help must say it itself (tests/machine/test_machine_check.py checks)
        shown = ",".join(map(str, action.default)) if isinstance(action.default, list) else "%(default)s"
        return text + f" (default: {shown})"


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (no usage dump) and exit status 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # the top-level parser's own name is the prefix every refusal gets ("hybridsched:
        # error: ..."); a subcommand's is kept, to say whose option it was ("run: ...").
        # argparse's "argument -k: " goes where our own message names the option already
        # ("argument -k: -k must be integers" read twice)
        head, sep, rest = message.partition(": ")
        if sep and head.startswith("argument ") and any(
                rest.startswith(f"{opt} ") for opt in head[len("argument "):].split("/")):
            message = rest
        sub = self.prog[len(PROG) + 1:] if self.prog.startswith(f"{PROG} ") else self.prog
        raise UsageError(message if self.prog == PROG else f"{sub}: {message}")


_INT_LIMIT = 2**63


def int_list(what: str, minimum: int = 1):
    def parse(text: str) -> list[int]:
        out = []
        for part in text.split(","):
            part = part.strip()
            try:
                v = int(part)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{what} must be integers, got {part!r}") from None
            if v < minimum:
                raise argparse.ArgumentTypeError(f"{what} must be at least {minimum}, got {v}")
            if v >= _INT_LIMIT:  # stored as int64 in HDF5
                raise argparse.ArgumentTypeError(f"{what} must be below 2**63, got {v}")
            out.append(v)
        return out
    return parse


def chunk_list(text: str) -> list[int]:
    """--chunk: sizes >= 1, or 'auto' (policies.AUTO_CHUNK: the pipe backend searches it)."""
    from ..core.policies import AUTO_CHUNK

    parts = [p.strip() for p in text.split(",")]
    sizes = int_list("--chunk")(",".join(p for p in parts if p.lower() != "auto")) \
        if any(p.lower() != "auto" for p in parts) else []
    return [AUTO_CHUNK] * any(p.lower() == "auto" for p in parts) + sizes


def positive(what: str, minimum: int = 1):
    parse_list = int_list(what, minimum)

    def parse(text: str) -> int:
        vals = parse_list(text)
        if len(vals) != 1:
            raise argparse.ArgumentTypeError(f"{what} takes one value, got {text!r}")
        return vals[0]
    return parse


def _ranged(convert, within, bad: str, outside: str):
    """A parser of one number: ``convert(text)``, refused with ``bad`` where it fails and
    with ``outside`` where ``within(value)`` is False (both formatted with text and v)."""
    def parse(text: str):
        try:
            v = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(bad.format(text=text)) from None
        if not within(v):
            raise argparse.ArgumentTypeError(outside.format(text=text, v=v))
        return v
    return parse


def seconds(what: str):
    """A duration in seconds, above 0 and finite."""
    return _ranged(float, lambda v: 0 < v < float("inf"), what + ": not a number of seconds: {text!r}",
                   what + " must be a finite number of seconds above 0, got {text}")


def nonnegative_int(what: str):
    # a uint64 for the generator, int64 in HDF5
    return _ranged(int, lambda v: 0 <= v < _INT_LIMIT, what + " must be an integer, got {text!r}",
                   what + " must be from 0 to 2**63-1, got {v}")


def name_list(text: str) -> list[str]:
    """A comma list of names (order kept, repeats dropped); an empty one, or an empty name
    in it (``dynamic,,guided``, as ``-k 1,,2`` is), is bad input."""
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise argparse.ArgumentTypeError(f"expected one or more names, got {text!r}")
    if not all(parts):
        raise argparse.ArgumentTypeError(f"an empty name in {text!r}")
    return list(dict.fromkeys(parts))


def choice_list(choices, what: str):
    """A comma list of names from ``choices`` (order kept, repeats dropped)."""
    def parse(text: str) -> list[str]:
        names = name_list(text)
        bad = [t for t in names if t not in choices]
        if bad or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {bad[0] if bad else text!r}; choose from {', '.join(choices)}")
        return names
    return parse


class ListsJoined(argparse.Action):
    """A comma-list option given more than once: the lists joined, repeats dropped
    (``--policy linux --policy gang`` is linux,gang; the last alone was kept)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        have = getattr(namespace, self.dest, None) or []
        setattr(namespace, self.dest, list(dict.fromkeys([*have, *values])))


def fraction(name: str):
    return _ranged(float, lambda v: 0.0 <= v <= 1.0, name + ": not a number: {text!r}",
                   name + " must be within 0 .. 1, got {text}")


def param_item(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` of --param: the key a name, the value an int, a float or text without
    ',' or '=' (a run stores its parameters as ``key=value,...``)."""
    from ..records import param_value

    key, sep, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not sep:
        raise argparse.ArgumentTypeError(f"--param {text!r}: expected KEY=VALUE")
    if not key.isidentifier():
        raise argparse.ArgumentTypeError(f"--param {text!r}: the key must be a name (letters, "
                                         "digits, '_')")
    if not value or "," in value or "=" in value or not value.isprintable():
        raise argparse.ArgumentTypeError(f"--param {text!r}: the value must be non-empty, "
                                         "printable, without ',' or '='")
    if key == "profile":
        raise argparse.ArgumentTypeError("--param profile: the name is hybridsched's own (the "
                                         "loop's profile)")
    return key, param_value(value)


def split_name(choices):
    """--split: one of ``choices`` or a ``package.module:Class`` reference (imported and
    checked later, with one line if it is not a deterministic technique)."""
    def parse(text: str) -> str:
        if text in choices or (":" in text and all(text.partition(":")[::2])):
            return text
        raise argparse.ArgumentTypeError(f"invalid choice {text!r} (choose from "
                                         f"{', '.join(choices)} or package.module:Class)")
    return parse
