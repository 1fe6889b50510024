"""The docs keep up with the code: the architecture page names every module, and the README's
default-run table is the one `make figures` wrote. (`make site` checks links and the nav.)"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_architecture_page_lists_every_module():
    page = (ROOT / "docs" / "development" / "architecture.md").read_text(encoding="utf-8")
    listed = set()
    package = None
    for line in page.splitlines():
        if heading := re.fullmatch(r"### `([\w/]+)/`", line):
            package = heading.group(1)
        elif package and (row := re.match(r"\| `(\w+\.py)` \|", line)):
            listed.add(f"{package}/{row.group(1)}")
    modules = {
        path.relative_to(ROOT).as_posix() for folder in ("orchestrator", "workers") for path in (ROOT / folder).rglob("*.py")
    }
    assert not modules - listed, f"docs/development/architecture.md does not list {sorted(modules - listed)}"
    assert not listed - modules, f"docs/development/architecture.md lists modules that do not exist: {sorted(listed - modules)}"


def test_the_readme_shows_the_default_run_as_make_figures_wrote_it():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- default-run:[^\n]*-->\n(.*?)\n<!-- /default-run -->", readme, flags=re.S)
    assert block, "README.md has no default-run block (`make figures` writes the table there)"
    assert block.group(1) == (ROOT / "docs" / "assets" / "default-run.md").read_text(encoding="utf-8").strip()
