"""The docs that describe the house match it, so they cannot drift.

CONTRIBUTING.md's layout names every package and top-level module, and
each module it names exists; docs/DESIGN.md §3 draws the floors that
``make lint`` checks (``.importlinter``), in the same order; the README
stays short enough to read in five minutes.
"""

from __future__ import annotations

import configparser
import pathlib
import re

import colab_resume

PACKAGE = pathlib.Path(colab_resume.__file__).parent
ROOT = PACKAGE.parent
README_MAX_LINES = 250


def layout_entries() -> dict[str, str]:
    """``{entry: its text}`` of CONTRIBUTING.md's package layout
    (``agent/``, ``retry.py``...)."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    block = text.split("```\ncolab_resume/\n", 1)[1].split("\n```", 1)[0]
    entries: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        top = re.match(r"^  (\S+)\s+(.*)$", line)
        if top:
            current = top.group(1)
            entries[current] = top.group(2)
        elif current is not None and line.startswith("  "):
            entries[current] += " " + line.strip()
        else:  # notebooks/, docs/...: the repository, not the package
            current = None
    return entries


def package_members() -> set[str]:
    """Every package (``agent/``) and top-level module (``retry.py``)."""
    members = {p.name + "/" for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    members |= {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    return members


def named_modules(text: str) -> set[str]:
    """Modules an entry names: ``name:`` and ``name/``, outside backquotes.

    Prose keeps its colons for module names (a dash introduces a list),
    and a slash inside a word (``pause/stop``, ``agent/core.py``) is no
    package.
    """
    text = re.sub(r"`[^`]*`", "", text)
    found = re.findall(r"(?<![\w./:])([a-z_][a-z0-9_]*)(?::(?!/)|/(?![\w.]))", text)
    return set(found)


def test_the_layout_lists_every_package_and_top_level_module():
    assert set(layout_entries()) == package_members()


def test_every_module_the_layout_names_exists():
    missing = {}
    for entry, text in layout_entries().items():
        if not entry.endswith("/"):
            continue
        folder = PACKAGE / entry.rstrip("/")
        present = {p.stem for p in folder.rglob("*.py")}
        present |= {p.name for p in folder.rglob("*") if p.is_dir()}
        gone = named_modules(text) - present
        if gone:
            missing[entry] = sorted(gone)
    assert missing == {}, f"CONTRIBUTING.md names modules that do not exist: {missing}"


def test_the_layout_check_reads_names_as_meant():
    assert named_modules("core: Agent; formats/: base:, (cadence: auto)") == {
        "core",
        "formats",
        "base",
        "cadence",
    }
    # Prose around it is not a module name: URLs, paths, code.
    assert named_modules("gs://bucket/x, agent/panel_maker.py, `a: b`") == set()


def floors_of_the_contract() -> list[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter", encoding="utf-8")
    layers = config["importlinter:contract:floors"]["layers"]
    return [line.strip() for line in layers.strip().splitlines()]


def test_design_draws_the_floors_make_lint_checks():
    design = (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    section = design.split("## 3. Architecture", 1)[1].split("\n## ", 1)[0]
    drawn = [
        line.split("  ")[0].strip()
        for line in section.split("imports only from", 1)[1]
        .split("```\n", 1)[1]
        .split("\n```", 1)[0]
        .splitlines()
    ]
    assert drawn == floors_of_the_contract()
    members = {m.rstrip("/").removesuffix(".py") for m in package_members()}
    on_a_floor = {name.strip() for floor in drawn for name in floor.split(":")}
    assert on_a_floor == members


def test_the_readme_reads_in_five_minutes():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, more than {README_MAX_LINES}: move "
        f"detail to the docs site (docs/guide/) and link it"
    )
