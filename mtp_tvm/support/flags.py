"""Each option declared once: a command-line flag lives with the dataclass field that carries it.

``option(default, help=...)`` is a ``dataclasses.field`` whose metadata holds the field's ``Flag``; the flag's
name is the field's (``dump_filter`` -> ``--dump-filter``; a repeatable flag of a tuple field is the singular:
``disable_passes`` -> ``--disable-pass``). From that one declaration come the argparse flags (``add_flags``), the
options object of a parsed command line (``options_from``), the flags that restate an object (``as_argv``),
and the refusal sets (``flag_names(..., group)``: which options describe a case, come from an artifact's
manifest, or only debug a compile). Options that are a command's keywords, not a dataclass's field, are
declared the same way with ``Flag`` itself. No parser is built here (this support module sits below every
layer that declares options): the CLI's parser tells given flags from defaulted ones."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Iterable
from typing import Any

_MISSING = dataclasses.MISSING
# what an option describes: refused with --module ("case") or --artifact ("manifest", "debug"), or without
# --weights ("checkpoint")
GROUPS = ("case", "manifest", "debug", "checkpoint")


@dataclasses.dataclass(frozen=True)
class Flag:
    """One command-line option: ``dest`` the field (or keyword) it sets; ``repeat`` appends to a tuple;
    ``optional_value`` the value of the bare flag when its value may be left out (``--dump-passes [DIR]``);
    ``text`` its value as the flag's word (None: no flag restates it); ``groups`` of ``GROUPS``; ``aliases``
    older spellings the parser still accepts; ``deprecated`` renamed spellings it still accepts with a warning;
    ``shown`` what an unset default stands for; ``required`` a flag the command cannot do without."""

    dest: str
    help: str
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: tuple | None = None
    repeat: bool = False
    optional_value: Any = None
    text: Callable[[Any], str | None] = str
    groups: frozenset[str] = frozenset()
    default: Any = None  # a keyword's own default (a field's is the field's)
    aliases: tuple[str, ...] = ()  # older spellings still accepted
    shown: str | None = None  # what an unset (None) default means, for the help: "512", "the preset's"
    deprecated: tuple[str, ...] = ()  # renamed spellings, accepted for one release with a warning on stderr
    required: bool = False

    def __post_init__(self):
        unknown = set(self.groups) - set(GROUPS)
        assert not unknown, f"flag {self.name}: unknown groups {unknown}"
        assert not self.deprecated or not (self.switch or self.repeat), f"flag {self.name}: a renamed value flag"
        object.__setattr__(self, "groups", frozenset(self.groups))

    @property
    def name(self) -> str:
        """``--dest-with-dashes``, without the plural ``s`` of a repeatable flag."""
        word = self.dest
        if self.repeat:  # disable_passes -> disable-pass
            word = word.removesuffix("es") if word.endswith("sses") else word.removesuffix("s")
        return "--" + word.replace("_", "-")

    @property
    def switch(self) -> bool:
        """A flag without a value (True when given)."""
        return self.type is None and self.metavar is None and self.choices is None and not self.repeat

    def add_to(self, parser, help: str | None = None, default: Any = _MISSING) -> None:
        """Add this flag to an argparse parser, its default ``default`` (else its own), named in its help."""
        help = help or self.help
        if self.default_text and "default" not in help:
            help += f" (default {self.default_text})"
        kwargs: dict[str, Any] = {"dest": self.dest, "help": help,
                                  "default": self.default if default is _MISSING else default}
        if self.required:
            kwargs["required"] = True
        if self.switch and self.optional_value is None:
            kwargs["action"] = "store_true"
            if kwargs["default"] is None:  # a switch left off is False, as argparse's own
                kwargs["default"] = False
        else:
            if self.repeat:
                kwargs["action"] = "append"
            if self.optional_value is not None:
                kwargs.update(nargs="?", const=self.optional_value)
            for key in ("type", "metavar", "choices"):
                if getattr(self, key) is not None:
                    kwargs[key] = getattr(self, key)
        parser.add_argument(self.name, *self.aliases, **kwargs)
        for old in self.deprecated:
            parser.add_argument(old, dest=self.dest, help=argparse.SUPPRESS, default=argparse.SUPPRESS,
                                action=_Renamed, const=self.name,
                                **{k: v for k, v in kwargs.items() if k in ("type", "metavar", "choices")})

    @property
    def default_text(self) -> str | None:
        """The default as the help names it (None: off, nothing to name)."""
        if self.shown is not None:
            return self.shown
        unset = self.default is None or self.default is False or self.default == ()  # 0 is a default, not off
        return None if unset else (self.words(self.default) or [str(self.default)])[-1]

    def words(self, value) -> list[str]:
        """The flags that restate ``value`` ([] for an unset one: None, False, empty)."""
        if value is None or value is False or (self.repeat and not value):
            return []
        if value is True:
            return [self.name]
        if self.optional_value is not None and value == self.optional_value:
            return [self.name]
        if self.repeat:
            return [w for v in value for w in (self.name, self.text(v))]
        text = self.text(value)
        return [] if text is None else [self.name, text]


class _Renamed(argparse.Action):
    """A renamed flag's old spelling (``Flag.deprecated``): sets the same field, and says so on stderr."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: warning: {option_string} is deprecated and goes in the next release; use "
              f"{self.const}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def option(default: Any = _MISSING, *, help: str, default_factory=_MISSING, compare: bool = True,
           **flag) -> Any:
    """A dataclass field with its flag (``Flag``'s keywords besides ``dest``, which is the field's name)."""
    return dataclasses.field(default=default, default_factory=default_factory, compare=compare,
                             metadata={"flag": {"help": help, **flag}})


def flags(cls) -> dict[str, Flag]:
    """The flags of dataclass ``cls``'s fields, by field name, in field order."""
    out = {}
    for f in dataclasses.fields(cls):
        if "flag" in f.metadata:
            default = f.default if f.default is not _MISSING else (
                f.default_factory() if f.default_factory is not _MISSING else None)
            out[f.name] = Flag(dest=f.name, default=default, **f.metadata["flag"])
    return out


def flag_names(cls_or_flags, group: str) -> tuple[str, ...]:
    """The dests of the flags in ``group`` (of a dataclass, or of an iterable of ``Flag``s)."""
    found = flags(cls_or_flags).values() if dataclasses.is_dataclass(cls_or_flags) else cls_or_flags
    return tuple(f.dest for f in found if group in f.groups)


def add_flags(parser, cls, only: Iterable[str] | None = None, help: dict[str, str] | None = None,
              defaults: dict[str, Any] | None = None) -> None:
    """Add ``cls``'s flags (``only`` those) to ``parser``; ``help`` replaces a flag's help text, ``defaults`` its
    default, where a command uses it in its own way."""
    for name, f in flags(cls).items():
        if only is None or name in only:
            f.add_to(parser, (help or {}).get(name), (defaults or {}).get(name, _MISSING))


def options_from(args, cls, **overrides):
    """An instance of ``cls`` from a parsed namespace's values of its flagged fields (a field whose flag the
    command lacks keeps its default; a repeatable flag's list becomes a tuple), ``overrides`` over them."""
    values = {name: tuple(getattr(args, name)) if f.repeat and getattr(args, name) is not None
              else getattr(args, name) for name, f in flags(cls).items() if hasattr(args, name)}
    return cls(**{**values, **overrides})


def comma_list(text: str) -> tuple[str, ...]:
    """A comma list flag's word: ``"a, b"`` -> ``("a", "b")``, ``""`` -> ``()``."""
    return tuple(filter(None, (s.strip() for s in text.split(","))))


def as_argv(obj, **text: str) -> list[str]:
    """The flags that restate the flagged fields of ``obj`` (unset ones omitted); ``text`` replaces a field's
    word (e.g. a target resolved to JSON)."""
    argv: list[str] = []
    for name, f in flags(type(obj)).items():
        argv += [f.name, text[name]] if name in text else f.words(getattr(obj, name))
    return argv
