"""``package.module:name`` references to user code (kernels, verifiers, techniques): the one
importer, so every kind of reference fails the same way, in one line."""
from __future__ import annotations

import importlib
import os
import sys

from .errors import UsageError


def import_object(ref: str, what: str, expected: str = "package.module:name") -> object:
    """The object named by ``package.module:name`` (dots after the colon walk attributes).
    The current directory is searched last, so `hybridsched run` finds a module beside the
    user without shadowing an installed one. Every failure is one UsageError line."""
    if not isinstance(ref, str):
        raise UsageError(f"{what}: expected {expected}, got {type(ref).__name__}")
    mod_name, sep, attr = ref.partition(":")
    if not sep or not mod_name or not attr:
        raise UsageError(f"{what} {ref!r}: expected {expected}")
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)
    try:
        obj = importlib.import_module(mod_name)
    except SystemExit as exc:  # the module ends the interpreter while it is imported
        raise UsageError(f"{what} {ref!r}: importing {mod_name!r} called exit({exc.code!r})") from None
    except ImportError as exc:
        raise UsageError(f"{what} {ref!r}: cannot import {mod_name!r}: {exc}") from None
    except Exception as exc:  # the module itself fails on import
        raise UsageError(f"{what} {ref!r}: importing {mod_name!r} raised "
                         f"{type(exc).__name__}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"{what} {ref!r}: {mod_name!r} has no attribute {attr!r}") from None
    return obj
