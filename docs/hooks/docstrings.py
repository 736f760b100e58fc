"""A griffe extension: the project's docstrings (reST inline markup, doctest examples) as
the Markdown that mkdocstrings renders. Doctest blocks become ``pycon`` code blocks,
``literal`` and :role:`target` become code spans."""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
LITERAL = re.compile(r"``([^`]+)``")


def markdown(text: str) -> str:
    r"""``text`` with its doctest blocks fenced and its reST inline markup as code spans.

    >>> markdown("Use ``f`` (:func:`~m.f`).\n\n>>> f()\n1\n\nDone.").splitlines()
    ['Use `f` (`m.f`).', '', '```pycon', '>>> f()', '1', '```', '', 'Done.']
    >>> markdown("Text\n>>> 2\n2").splitlines()  # a fence opens a block of its own
    ['Text', '', '```pycon', '>>> 2', '2', '```']
    """
    out: list[str] = []
    in_example = False
    for line in text.splitlines():
        if line.lstrip().startswith(">>>") and not in_example:
            if out and out[-1].strip():
                out.append("")
            out.append("```pycon")
            in_example = True
        elif in_example and not line.strip():
            out.append("```")
            in_example = False
        out.append(line if in_example else LITERAL.sub(r"`\1`", ROLE.sub(r"`\1`", line)))
    if in_example:
        out.append("```")
    return "\n".join(out)


class ReSTToMarkdown(Extension):
    """Rewrite every docstring once: objects when the tree is built, packages (whose
    docstring that hook does not reach) when loaded."""

    def __init__(self) -> None:
        super().__init__()
        self.done: set[int] = set()

    def _rewrite(self, obj: Object) -> None:
        if obj.docstring is not None and id(obj.docstring) not in self.done:
            obj.docstring.value = markdown(obj.docstring.value)
            self.done.add(id(obj.docstring))

    def on_object(self, *, obj: Object, **kwargs: Any) -> None:
        self._rewrite(obj)

    def on_package(self, *, pkg: Object, **kwargs: Any) -> None:
        self._rewrite(pkg)
