"""Every citation in the code and the docs resolves inside the repository: a ruling to its
section of docs/design.md, a page a link names to a file that exists; nothing cites a text
the repository does not hold (the specification's pages, a reference's sections)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("runs", "harness", "simrun_site", "docs", "templates", "tests", "bench", "docker")
SUFFIXES = {".py", ".md", ".html", ".yaml", ".yml", ".txt", ".toml"}
RULING = re.compile(r"\bRulings? ((?:\d+[a-z]?(?:, | and |/)?)+)")
ELSEWHERE = re.compile(r"spec/\d{3}|§|(?<![\w/.\[(])design\.md|\breference \(")
"""Citations of texts outside the repository: the spec's pages, a reference's sections, the
design notes that preceded docs/design.md."""
LINK = re.compile(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)")


def scanned() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder in SCANNED:
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in SUFFIXES and p.is_file()]
    return [p for p in files if "migrations" not in p.parts and p.name != "test_citations.py"]


def rulings(text: str) -> set[str]:
    return {n for found in RULING.findall(text) for n in re.split(r", | and |/", found) if n}


def test_every_ruling_cited_is_a_section_of_the_design_page():
    design = (ROOT / "docs" / "design.md").read_text()
    defined = rulings("\n".join(line for line in design.splitlines() if line.startswith("### ")))
    cited = {
        f"{path.relative_to(ROOT)}: Ruling {number}"
        for path in scanned()
        for number in rulings(path.read_text(errors="replace"))
        if number not in defined
    }
    assert defined >= {"17b", "23", "24", "25", "34", "35", "39"}
    assert not cited


def test_nothing_cites_a_text_outside_the_repository():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}"
        for path in scanned()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
        if ELSEWHERE.search(line)
    ]
    assert not found


def test_every_page_a_doc_links_to_exists():
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    missing = [
        f"{page.relative_to(ROOT)} -> {target}"
        for page in pages
        for target in LINK.findall(page.read_text())
        if not target.startswith(("http", "mailto")) and not (page.parent / target).exists()
    ]
    assert not missing


def test_the_checks_see_what_they_look_for():
    assert rulings("as Rulings 34 and 39 say, and Ruling 17b; 34/39") == {"17b", "34", "39"}
    assert ELSEWHERE.search("(reference §5.2)") and ELSEWHERE.search("see spec/000")
    assert ELSEWHERE.search("as design.md says") and not ELSEWHERE.search("docs/design.md")
