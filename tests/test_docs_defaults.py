"""The documented defaults are TopologyConfig's own: README's configuration table lists
every field with the default rendered from the model, and no page calls another value
"the default". So docs and code cannot drift apart again."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from transactional.config import TopologyConfig

REPO = Path(__file__).resolve().parents[1]


def render(value: Any) -> str:
    """A default as README's table writes it."""
    if value is None or isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return f"`{value}`"
    return f"`{value!r}`"


def readme_table() -> dict[str, str]:
    """README's configuration table: field -> the default it documents."""
    text = (REPO / "README.md").read_text()
    table = text[text.index("| field | default |"):]
    table = table[:table.index("\n\n")]
    rows: dict[str, str] = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        names = re.findall(r"`(\w+)`", cells[0].split("(")[0])
        defaults = [d.strip() for d in re.findall(r"`[^`]*`|[^,`]+", cells[1]) if d.strip()]
        defaults = defaults * len(names) if len(defaults) == 1 else defaults   # `a`, `b` | `[]`
        assert len(defaults) == len(names), line
        rows.update(zip(names, defaults, strict=True))
    return rows


def test_readme_lists_every_field_with_its_default() -> None:
    documented = readme_table()
    fields = TopologyConfig.model_fields
    assert sorted(set(fields) - set(documented)) == [], "fields missing from README's table"
    assert sorted(set(documented) - set(fields)) == [], "README documents fields TopologyConfig lacks"
    actual = {name: render(f.get_default(call_default_factory=True)) for name, f in fields.items()}
    wrong = {name: (documented[name], actual[name]) for name in fields if documented[name] != actual[name]}
    assert wrong == {}, "README default != TopologyConfig default (documented, actual)"


def test_no_page_calls_another_value_the_default() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    fields = TopologyConfig.model_fields
    wrong = []
    for page in pages:
        for name, value in re.findall(r"`(\w+)=([^`]+)`\s*\(the default", page.read_text()):
            if name in fields and value != repr(fields[name].default) and value != str(fields[name].default):
                wrong.append((page.name, name, value, fields[name].default))
    assert wrong == []


def test_render_catches_a_drift() -> None:
    assert render(15.0) == "15" and render(0.5) == "0.5" and render("local[*]") == "`local[*]`"
    assert render(None) == "None" and render([]) == "`[]`" and render({}) == "`{}`"
