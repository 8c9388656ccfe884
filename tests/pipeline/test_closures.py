"""Code closures (pipeline/closures.py): a stage's closure holds what its command may import, the modules a registry
imports by name from a folder scan (`IMPORTS_EACH`) included, and a paper's own stage command holds its paper's
package, not the other papers'."""
from __future__ import annotations

from pathlib import Path

from crossmodal.pipeline import closures

PAPERS = Path(closures.PACKAGE) / "papers"


def test_a_registry_that_imports_every_paper_holds_every_papers_record():
    records = {f"src/crossmodal/papers/{p.parent.name}/paper.py" for p in PAPERS.glob("*/paper.py")}
    assert len(records) >= 6
    assert records <= set(closures.closure(closures.roots(closures.key("index"))))  # the index lists every paper
    assert records <= set(closures.closure(closures.roots(closures.key("params"))))  # the generator builds them


def test_a_papers_command_holds_its_paper_not_the_others():
    files = set(closures.closure(closures.roots(closures.key("papers.hoca.commands.hoca_cost", "models.hoca"))))
    assert {"src/crossmodal/papers/hoca/commands/hoca_cost.py", "src/crossmodal/papers/hoca/paper.py",
            "src/crossmodal/models/hoca.py"} <= files
    assert not any(f.startswith("src/crossmodal/papers/") and "/hoca/" not in f and not f.endswith("papers/__init__.py")
                   for f in files)
