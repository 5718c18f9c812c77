"""Every Python name the documentation cites exists.

``docs/architecture.rst`` walks requests through the real functions, and the
other pages point at modules, classes and functions by their dotted names.
Code moves; these tests fail on the first cited name that no longer imports,
so a page cannot keep describing code that is gone. No server, no Sphinx
build: each name is imported (its longest importable module prefix) and the
rest is resolved attribute by attribute. A name that is a whole module is
found by its file and not imported: some modules act when imported
(:mod:`queuey.wsgi` builds the app and marks its process as one of several
workers), and a test must not change the process the next test runs in.

``docs/architecture.rst`` also names every module of the package, so a new
module cannot go undescribed.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PACKAGE = ROOT / "queuey"

#: ``:func:`queuey.x.y```, ``:class:`~queuey.x.Y```, ``:meth:`title <queuey.x.Y.z>```.
ROLE = re.compile(r":(?:py:)?(?:mod|class|func|meth|attr|data|exc|obj):`([^`]+)`")
#: ``.. automodule:: queuey.x`` and the other autodoc directives.
DIRECTIVE = re.compile(
    r"^\s*\.\.\s+auto(?:module|class|function|method|attribute|data|exception)::\s*(\S+)",
    re.MULTILINE,
)


def role_target(text: str) -> str:
    """The dotted name of a role's content: ``title <target>`` or ``~target``."""
    explicit = re.fullmatch(r"(?s).*<([^<>]+)>", text)
    target = explicit.group(1) if explicit else text
    return target.strip().lstrip("~!").removesuffix("()")


def cited_names() -> list[tuple[str, str]]:
    """(page, dotted name) for every ``queuey.`` name cited in ``docs/*.rst``."""
    found = set()
    for page in sorted(DOCS.glob("*.rst")):
        text = page.read_text(encoding="utf-8")
        targets = [role_target(m) for m in ROLE.findall(text)] + DIRECTIVE.findall(text)
        found.update((page.name, t) for t in targets if t == "queuey" or t.startswith("queuey."))
    return sorted(found)


def module_file(dotted: str) -> Path | None:
    """The file of the package's module ``dotted`` names, if it names one."""
    relative = Path(*dotted.split("."))
    for candidate in (ROOT / relative / "__init__.py", (ROOT / relative).with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def package_modules() -> list[str]:
    """The dotted name of every module in the package (``__init__`` as its package)."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def resolve(dotted: str) -> object:
    """The object a dotted name names: a module of the package by its spec
    (not imported, see above); else the longest prefix that imports as a
    module, then attributes. Raises ``LookupError`` naming what is missing."""
    if module_file(dotted) is not None:
        spec = importlib.util.find_spec(dotted)
        if spec is None:
            raise LookupError(f"{dotted} has a file but no module spec")
        return spec
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # Only "this prefix is not a module"; a module that exists but fails
            # to import (a missing name inside it) is a real failure.
            if exc.name is not None and module_name.startswith(exc.name):
                continue
            raise
        for index, attribute in enumerate(parts[cut:], start=cut):
            try:
                obj = getattr(obj, attribute)
            except AttributeError:
                raise LookupError(
                    f"{'.'.join(parts[:index])} has no attribute {attribute!r}"
                ) from None
        return obj
    raise LookupError(f"no module {parts[0]!r}")


CITED = cited_names()


def test_the_pages_cite_names_at_all():
    """Guards the collection itself: the architecture page cites many."""
    pages = {page for page, _ in CITED}
    assert "architecture.rst" in pages
    assert len(CITED) > 50


@pytest.mark.parametrize(("page", "dotted"), CITED, ids=[f"{p}:{d}" for p, d in CITED])
def test_every_cited_name_resolves(page, dotted):
    try:
        resolve(dotted)
    except LookupError as exc:
        pytest.fail(f"docs/{page} cites {dotted}: {exc}")


def test_role_targets_are_read_as_sphinx_reads_them():
    assert role_target("~queuey.model.QueueMeta") == "queuey.model.QueueMeta"
    assert role_target("the post <queuey.core.workqueues.WorkQueues.post>") == (
        "queuey.core.workqueues.WorkQueues.post"
    )
    assert role_target("queuey.spark.local_session()") == "queuey.spark.local_session"


def test_resolve_names_what_is_missing():
    assert resolve("queuey.model.QueueMeta") is importlib.import_module("queuey.model").QueueMeta
    with pytest.raises(LookupError, match="no attribute 'Nothing'"):
        resolve("queuey.model.Nothing")


def test_a_cited_module_is_found_without_importing_it():
    import sys

    sys.modules.pop("queuey.wsgi", None)
    assert resolve("queuey.wsgi").name == "queuey.wsgi"
    assert "queuey.wsgi" not in sys.modules


def test_the_architecture_page_names_every_module():
    """Each module of the package is cited on docs/architecture.rst (as
    ``:mod:`` or inside another role's dotted name)."""
    text = (DOCS / "architecture.rst").read_text(encoding="utf-8")
    named = {role_target(m) for m in ROLE.findall(text)}
    prefixes = {".".join(n.split(".")[:cut]) for n in named for cut in range(1, n.count(".") + 2)}
    missing = [module for module in package_modules() if module not in prefixes]
    assert not missing, f"docs/architecture.rst does not name {len(missing)}: {missing}"
