"""HTML pages filled from data that may hold anything (pass names, regexes, error messages, IR text): run
folders are shared, so a page must never run or render its data as markup.

A page is a template with ``{{slot}}`` placeholders filled in one pass (a value is never scanned for
placeholders again, so data that spells ``{{history}}`` stays text); every value is a ``Markup`` made by
``escape`` (text) or ``json_script`` (data for the page's script), or markup the caller composed of those. JSON
in a ``<script>`` element has ``<``, ``>``, ``&`` and U+2028/U+2029 written as ``\\uXXXX``, so no string in it can
end the element, open a comment or break a JavaScript string.

The templates, their styles and scripts are files shipped with the package (package data, ``template``), so
they read and lint as HTML, CSS and JavaScript; a page still embeds them and is one self-contained file.
"""

from __future__ import annotations

import functools
import html
import importlib.resources
import json
import re

_SLOT = re.compile(r"\{\{(\w+)\}\}")
_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_JSON_UNSAFE = re.compile("[<>&\u2028\u2029]")


class Markup(str):
    """A string that is already safe HTML (escaped text, or markup built from escaped parts)."""


def escape(text) -> Markup:
    """``text`` as HTML text (quotes escaped too, so it may stand in an attribute)."""
    return Markup(html.escape(str(text), quote=True))


def json_script(element_id: str, data) -> Markup:
    """``data`` as a ``<script type="application/json">`` element that the page's script ``JSON.parse``s."""
    text = _JSON_UNSAFE.sub(lambda m: _JSON_ESCAPES[m.group(0)], json.dumps(data, separators=(",", ":")))
    return Markup(f'<script type="application/json" id="{escape(element_id)}">{text}</script>')


@functools.cache
def template(package: str, name: str) -> Markup:
    """The text of ``templates/<name>`` shipped with ``package`` (ours, so it is markup as it stands)."""
    return Markup(importlib.resources.files(package).joinpath("templates", name).read_text(encoding="utf-8"))


def render(template: str, **slots: Markup) -> str:
    """``template`` with each ``{{name}}`` replaced by ``slots[name]``, in one pass. A value that is a plain
    ``str`` (not ``Markup``) is a programming error, as is a slot without a value or a value without a slot."""
    plain = [name for name, value in slots.items() if not isinstance(value, Markup)]
    if plain:
        raise TypeError(f"render: slots {', '.join(plain)} are not Markup (escape or json_script them)")
    names = set(_SLOT.findall(template))
    if names != set(slots):
        raise KeyError(f"render: template slots {sorted(names)} != values {sorted(slots)}")
    return _SLOT.sub(lambda m: slots[m.group(1)], template)
