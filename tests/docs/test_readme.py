"""The README a newcomer reads: short, in the order it promises, its status table generated from the committed
results, its numbers those of the metrics files, and one name per thing: every stage it or a docs page names
exists in the stage files, and every command of its code blocks is one this repository knows."""
from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest
import yaml

from crossmodal.config.loader import load
from crossmodal.cli import stage_commands

COMMANDS = {**stage_commands(), "pipelines": None}
from crossmodal.reports.index_page import SUMMARY_BEGIN, SUMMARY_END, status_block
from crossmodal.stages.index import status

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("**/*.md"))
FIX = "python scripts/readme_status.py"


def _stages() -> dict[str, set[str]]:
    """{stage file: its stage names} of dvc.yaml and every pipelines/<paper>/dvc.yaml."""
    files = [ROOT / "dvc.yaml", *sorted((ROOT / "pipelines").glob("*/dvc.yaml"))]
    return {f.relative_to(ROOT).as_posix(): set(yaml.safe_load(f.read_text())["stages"]) for f in files}


STAGES = _stages()
ALL_STAGES = set().union(*STAGES.values())


# ---------------------------------------------------------------- the README's shape and its generated table


def test_readme_is_short_and_in_the_promised_order():
    text = README.read_text()
    assert len(text.splitlines()) <= 150, f"README.md has {len(text.splitlines())} lines; the rest goes to docs/"
    assert max(len(line) for line in text.splitlines()) <= 120
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == ["## Status", "## Quick start", "## Headline results (synthetic data, not COCO)",
                        "## Run a variant", "## Run one paper", "## Browse the runs (MLflow UI)", "## Documentation",
                        "## License and citation"]
    assert "The results are committed: open `reports/index.md`." in text
    assert "MIT" in text and "keep their own terms" in text
    for name in ("LICENSE", "CITATION.cff", "docs/papers.bib"):
        assert (ROOT / name).is_file() and f"({name})" in text


def test_quick_start_is_the_two_commands_ci_reads():
    """.ci/run takes the second line of the first code block after `## Quick start`: keep that shape."""
    lines = README.read_text().splitlines()
    start = lines.index("## Quick start")
    fences = [i for i in range(start, len(lines)) if lines[i].startswith("```")][:2]
    block = lines[fences[0] + 1:fences[1]]
    assert lines[fences[0]] == "```bash" and len(block) == 2
    assert block[0].endswith("python -m crossmodal.pipeline.repro")
    assert "pytest" in block[1] and block[1].startswith("bash scripts/setup.sh")


def test_the_status_table_is_generated_from_the_committed_results():
    expected = status(load(str(ROOT / "params.yaml")), ROOT)
    assert status_block(README.read_text()) == expected, f"README.md's status table is stale: run `{FIX}`"
    index = (ROOT / "reports" / "index.md").read_text()
    assert expected in index, "reports/index.md's status differs from the summaries: run `python -m crossmodal index`"


def test_the_readme_opens_with_the_claims_in_plain_words_generated_from_the_committed_results():
    lines = README.read_text().splitlines()
    first_heading = next(i for i, line in enumerate(lines) if line.startswith("## "))
    assert SUMMARY_BEGIN in lines[:first_heading], "the summary block belongs under the title paragraph"
    expected = _readme_status().summary(load(str(ROOT / "params.yaml")))
    assert status_block(README.read_text(), SUMMARY_BEGIN, SUMMARY_END) == expected, \
        f"README.md's first lines are stale: run `{FIX}`"
    assert expected.startswith("Of the ") and "the worlds can test" in expected


def test_every_docs_page_is_linked_from_the_readme_and_links_resolve():
    text = README.read_text()
    for page in DOCS:
        assert f"(docs/{page.relative_to(ROOT / 'docs').as_posix()})" in text, f"{page.name}: not linked from README"
    for path in [README, *DOCS]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", path.read_text()):
            if "://" not in target:
                assert (path.parent / target).exists(), f"{path.name}: broken link {target}"


def test_no_words_a_reader_cannot_follow():
    """No developer budgets, issue trackers or platform notes: nothing outside the repository."""
    for path in [README, *DOCS]:
        prose = re.sub(r"`[^`]*`", "", path.read_text())  # file names such as bench_budget.py may stay
        for word in (r"\bissues?\b", r"\bbudgets?\b", r"\bplatform\b", r"\bGUIDE\b", r"\.\./shared"):
            assert not re.search(word, prose, re.I), f"{path.name}: {word}"


def _readme_status():
    """scripts/readme_status.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("readme_status", ROOT / "scripts" / "readme_status.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", [README, ROOT / "docs" / "results.md"], ids=lambda p: p.name)
def test_results_tables_print_the_committed_metrics(path):
    text = path.read_text()
    expected, rows = _readme_status().results_tables(text)
    assert rows >= 10
    for ours, committed in zip(text.splitlines(), expected.splitlines(), strict=True):
        assert ours == committed, f"{path.name}: stale row (run `{FIX}`)"


# ---------------------------------------------------------------- one name per thing: stages


SYSTEM_SHAPE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*_(?:scst|ensemble|seed\d+|enc\d+|dec|fuse)$")
STAGE_ADDRESS = re.compile(r"pipelines/(\w+)/dvc\.yaml:(\w+)")
STAGE_CONTEXT = re.compile(r"\bstages? `([^`]+)`|`([^`]+)` stages?\b", re.I)


def _prose(text: str) -> str:
    """Markdown without its fenced code blocks (the `#   reruns:` lines there have their own test)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _stage_table_names(text: str) -> list[str]:
    """The first backticked name of every row of a table whose first column is headed `stage ...`."""
    names, in_table = [], False
    for line in text.splitlines():
        if line.startswith("|"):
            cell = line.strip("|").split("|")[0].strip()
            if cell.lower().startswith("stage"):
                in_table = True
            elif in_table and not cell.startswith("---") and (found := re.search(r"`([^`]+)`", cell)):
                names.append(found.group(1))
        else:
            in_table = False
    return names


def stage_name_errors(text: str) -> list[str]:
    """What a page names as a stage and the stage files do not hold (or spell otherwise)."""
    errors = []
    cli_spellings = {c: c.replace("-", "_") for c in COMMANDS if "-" in c}  # `prepro-captions` -> `prepro_captions`
    prose = _prose(text)
    spans = re.findall(r"`([^`]+)`", prose)
    contextual = {a or b for a, b in STAGE_CONTEXT.findall(prose)} | set(_stage_table_names(prose))

    def check(name: str, why: str) -> None:
        if "<" in name:  # a pattern such as `download-<dataset>`: its fixed part must begin a stage name
            prefix = name.split("<")[0]
            if prefix and not any(s.startswith(prefix) for s in ALL_STAGES):
                errors.append(f"`{name}` ({why}): no stage begins with {prefix!r}")
        elif (m := re.fullmatch(r"(\w+):tables", name)) and f"pipelines/{m.group(1)}/dvc.yaml" in STAGES:
            if "tables" not in STAGES[f"pipelines/{m.group(1)}/dvc.yaml"]:
                errors.append(f"`{name}` ({why}): pipelines/{m.group(1)}/dvc.yaml has no tables stage")
        elif name not in ALL_STAGES:
            errors.append(f"`{name}` ({why}): no such stage in dvc.yaml or pipelines/*/dvc.yaml")

    for span in spans:
        for paper, stage in STAGE_ADDRESS.findall(span):
            if stage not in STAGES.get(f"pipelines/{paper}/dvc.yaml", set()):
                errors.append(f"`{span}`: pipelines/{paper}/dvc.yaml has no stage {stage!r}")
        if span.startswith("download") and re.match(r"download\W", span):
            check(span, "a download stage")
        elif SYSTEM_SHAPE.match(span):
            check(span, "a system")
        elif span in cli_spellings.values():
            check(span, "a stage kind")
        elif span in cli_spellings:
            errors.append(f"`{span}`: the command's spelling; the stage is `{cli_spellings[span]}`")
    for name in contextual:
        if " " not in name and "/" not in name and "=" not in name:
            check(name, "named as a stage")
    return errors


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_every_stage_a_page_names_exists(path):
    assert stage_name_errors(path.read_text()) == []


def test_the_stage_check_can_fail():
    bad = ("The `download@karpathy` stage, `xlan_enc9`, the stage `prepro-captions`, `prepro_captionz` stage, "
           "`pipelines/xlan/dvc.yaml:xlan_enc7`, `nosuch:tables` stage, `download@<dataset>` and\n\n"
           "| stage | what |\n|---|---|\n| `bogus` | no |\n")
    errors = "\n".join(stage_name_errors(bad))
    for name in ("download@karpathy", "xlan_enc9", "prepro-captions", "prepro_captionz", "xlan_enc7", "nosuch:tables",
                 "download@<dataset>", "bogus"):
        assert name in errors, name
    assert stage_name_errors("The `code` stage, `download-<dataset>`, `xlan_enc2`, `aoanet:tables` stage and "
                             "`pipelines/xlan/dvc.yaml:xlan_enc2`.") == []


# ---------------------------------------------------------------- one name per thing: commands


DVC_COMMANDS = {"repro", "exp", "queue", "params", "metrics", "plots", "dag", "status", "pull", "push", "fetch",
                "checkout", "gc", "diff", "data", "remote", "config", "version", "doctor", "commit", "stage"}


def _bash_lines(text: str) -> list[str]:
    blocks = re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)
    return [line for block in blocks for line in block.splitlines() if line.strip() and not line.startswith("#")]


def command_errors(line: str) -> list[str]:
    """Why one line of a bash block is not a command this repository knows (empty: it is)."""
    errors = []
    code = re.sub(r"\s+#.*$", "", line)
    for part in re.split(r"&&|;|\|\|", code):
        try:
            words = shlex.split(part)
        except ValueError as err:
            return [f"{line!r}: {err}"]
        if not words:
            continue
        first, rest = words[0], words[1:]
        python = first in ("python", ".venv/bin/python")
        if first == "dvc":
            if not rest or rest[0] not in DVC_COMMANDS:
                errors.append(f"{part.strip()!r}: unknown dvc command")
        elif python and rest[:2] == ["-m", "crossmodal"]:
            if len(rest) < 3 or rest[2] not in COMMANDS:
                errors.append(f"{part.strip()!r}: `python -m crossmodal` has no such command (the stage modules)")
        elif python and rest[:2] in (["-m", "pytest"], ["-m", "crossmodal.pipeline.repro"]):
            pass
        elif python or first == "bash":
            script = rest[0] if rest else ""
            if not re.match(r"(scripts|benchmarks)/", script) or not (ROOT / script).is_file():
                errors.append(f"{part.strip()!r}: not a script of scripts/ or benchmarks/")
        elif first in (".", "source"):
            if rest != [".venv/bin/activate"]:
                errors.append(f"{part.strip()!r}: only .venv/bin/activate is sourced")
        elif first.startswith(".venv/bin/") or first == "sed":
            pass
        else:
            errors.append(f"{part.strip()!r}: unknown command {first!r}")
    return errors


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_every_command_in_a_bash_block_is_known(path):
    lines = _bash_lines(path.read_text())
    assert [e for line in lines for e in command_errors(line)] == []
    if path == README:
        assert len(lines) >= 6


def test_the_command_check_can_fail():
    for bad in ("dvc reproduce", "python -m crossmodal prepro_captions", "python scripts/nosuch.py",
                "bash setup.sh", "pip install crossmodal", "cd src && dvc repro", ". venv/bin/activate"):
        assert command_errors(bad), bad
    assert command_errors("bash scripts/setup.sh && . .venv/bin/activate && dvc repro   # all") == []
    assert command_errors("python -m crossmodal tables --paper xlan; python benchmarks/bench_loader.py") == []
