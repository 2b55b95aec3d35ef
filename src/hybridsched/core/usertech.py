"""Users' techniques found and identified: a ``package.module:Class`` reference, an
installed package's entry point (group ``hybridsched.techniques``), a class or an instance
becomes a :class:`UserTechnique` -- its name, its ``module:qualname`` and the sha256 of its
source, which a study stores so that runs of two versions are never pooled."""
from __future__ import annotations

import hashlib
import inspect
import re
import sys
from dataclasses import dataclass, field

from ..errors import UsageError
from ..refs import import_object
from .contract import Technique, configure, learns

GROUP = "hybridsched.techniques"
# The scheduler column is 64 bytes (store.format); "pipe-MtoM:" takes 10 of them
MAX_NAME = 54
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")  # no ',' (lists), ':' (references) or spaces
# words that -s reads as a set of schedulers, never as one
_SELECTORS = ("all", "paper", "techniques")
MAX_REF = 120  # the study's technique field (module:qualname)


def source_hash(cls: type) -> str:
    """sha256 of what the technique's behaviour depends on within its own code: the source
    of ``cls`` and of its user-defined bases (the code of their functions where the source
    cannot be read, e.g. a class typed into a REPL), and the whole source of the modules
    that define them (module-level constants and helpers that ``chunk()`` reads). Not
    covered: other modules it imports, files or the environment it reads."""
    h = hashlib.sha256(_class_source(cls))
    modules = dict.fromkeys(k.__module__ for k in _own_classes(cls))
    for name in modules:
        module = sys.modules.get(name)
        if module is None or name.split(".")[0] == __name__.split(".")[0]:
            continue  # hybridsched's own code is identified by its version
        try:
            text = inspect.getsource(module)
        except (OSError, TypeError):  # no file (a REPL's __main__): the classes alone
            continue
        h.update(b"\0module " + name.encode() + b"\0" + text.encode())
    return h.hexdigest()


def class_source_hash(cls: type) -> str:
    """The hash of hybridsched before issue 33 (the classes' source only): how the
    technique_hash of older studies was made, so that they are told apart."""
    return hashlib.sha256(_class_source(cls)).hexdigest()


def _own_classes(cls: type) -> list[type]:
    return [k for k in cls.__mro__ if k is not Technique and k is not object]


def _class_source(cls: type) -> bytes:
    parts = []
    for klass in _own_classes(cls):
        try:
            parts.append(inspect.getsource(klass).encode())
        except (OSError, TypeError):
            for key, value in sorted(vars(klass).items()):
                code = getattr(value, "__code__", None)
                parts.append(key.encode())
                parts.append(code.co_code + repr(code.co_consts).encode() if code else repr(value).encode())
    return b"".join(parts)


@dataclass(eq=False)
class UserTechnique:
    """One user technique: its class and, when the caller gave one, the instance that
    serves every execution; otherwise one instance per loop configuration."""

    cls: type[Technique]
    ref: str                     # module:qualname (the study's technique field)
    hash: str                    # technique_hash
    instance: Technique | None = None
    _loops: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.cls.name if self.instance is None else self.instance.name

    @property
    def deterministic(self) -> bool:
        obj = self.instance if self.instance is not None else self.cls
        return bool(obj.deterministic)

    @property
    def learns(self) -> bool:
        return learns(self.cls)

    def for_loop(self, key, tasks: int, workers: int, min_chunk: int, params: dict) -> Technique:
        """The object for one execution of loop ``key``, configured and started."""
        tech = self.instance
        if tech is None:
            tech = self._loops.get(key)
            if tech is None:
                tech = self._loops[key] = self.new()
        configure(tech, tasks, workers, min_chunk, params)
        return tech

    def new(self) -> Technique:
        """A fresh object (plans and precomputed hand-outs; the instance when one was given)."""
        if self.instance is not None:
            return self.instance
        try:
            return self.cls()
        except (Exception, SystemExit) as exc:
            raise UsageError(f"technique {self.ref}: {self.cls.__name__}() raised "
                             f"{type(exc).__name__}: {exc} (a technique is built without "
                             "arguments)") from None


def is_reference(name: str) -> bool:
    """Whether a scheduler name is a ``package.module:Class`` reference."""
    return isinstance(name, str) and ":" in name


def _checked(obj, what: str) -> UserTechnique:
    instance = None
    if isinstance(obj, Technique):
        instance, cls = obj, type(obj)
    elif isinstance(obj, type) and issubclass(obj, Technique) and obj is not Technique:
        cls = obj
    else:
        raise UsageError(f"{what}: {_described(obj)} is not a hybridsched.Technique "
                         "subclass or instance")
    if cls.chunk is Technique.chunk:
        raise UsageError(f"{what}: {cls.__qualname__} does not define chunk()")
    name = instance.name if instance is not None else cls.name
    if not isinstance(name, str) or not _NAME.match(name) or len(name.encode()) > MAX_NAME:
        raise UsageError(f"{what}: technique name {name!r} must be 1 to {MAX_NAME} letters, "
                         "digits, '_', '-' or '.'")
    if name in _SELECTORS:
        raise UsageError(f"{what}: technique name {name!r} is a word of -s (a set of "
                         "schedulers); give it another name")
    if not isinstance(getattr(cls, "deterministic", False), bool):
        raise UsageError(f"{what}: deterministic must be True or False")
    ref = f"{cls.__module__}:{cls.__qualname__}"
    if len(ref.encode()) > MAX_REF:
        raise UsageError(f"{what}: {ref[:60]}... is longer than the {MAX_REF} bytes a study "
                         "stores for a technique")
    if instance is None:
        _constructible(cls, what)
    return UserTechnique(cls, ref, source_hash(cls), instance)


def _described(obj) -> str:
    """What ``obj`` is, in a few words: a module, class or function by its name (a repr cut
    at a width ended in the middle of a path), anything else by a shortened repr."""
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if isinstance(name, str):
        return f"{type(obj).__name__} {name}"
    text = repr(obj)
    return f"{type(obj).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _constructible(cls: type, what: str) -> None:
    """A technique given as a class is built without arguments: refuse one that cannot be."""
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):
        return
    need = [p.name for p in sig.parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                                   p.KEYWORD_ONLY)]
    if need:
        raise UsageError(f"{what}: {cls.__qualname__}() needs {', '.join(need)}; hybridsched "
                         "builds a technique without arguments (give an instance instead)")


def resolve(obj, what: str = "technique") -> UserTechnique:
    """A UserTechnique for a reference string, a Technique class or an instance."""
    if isinstance(obj, str):
        obj = import_object(obj, what, "package.module:Class")
    return _checked(obj, what)


def entry_points() -> dict:
    """Installed techniques: entry-point name -> entry point (nothing imported yet)."""
    from importlib import metadata  # scanning the installed distributions: only when asked

    return {ep.name: ep for ep in metadata.entry_points(group=GROUP)}


def from_entry_point(name: str) -> UserTechnique | None:
    """The installed technique registered under entry-point ``name`` (None: there is none)."""
    ep = entry_points().get(name)
    if ep is None:
        return None
    try:
        obj = ep.load()
    except (Exception, SystemExit) as exc:
        raise UsageError(f"technique {name!r} (entry point {ep.value} of "
                         f"{GROUP}) failed to load: {type(exc).__name__}: {exc}") from None
    return _checked(obj, f"entry point {name} = {ep.value}")
