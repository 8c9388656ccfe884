"""Our results as every results page reads and prints them: the tables (table_builder.py), the index and status
(index_page.py) and the claims page (claims.py).

`Results` reads our metrics files, each once; `profile_line` names, in a page's header, the data our numbers come
from; `fmt`, `decimals_of` and `md_row` print numbers and Markdown rows the same way on every page.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from crossmodal.environment import summary as environment_summary
from crossmodal.io import InputError, read_json
from crossmodal.reports.table_schema import expect_text


def profile_line(profile: Any, path: Path, dataset: str) -> str:
    """The header line that says, prominently, what data our numbers come from."""
    if not isinstance(profile, dict) or "profile" not in profile or "synthetic" not in profile:
        raise InputError(f"{path}: expected an object with 'profile' and 'synthetic'")
    name = expect_text(profile["profile"], f"{path}: profile")
    if not isinstance(profile["synthetic"], bool):
        raise InputError(f"{path}: synthetic must be true or false")
    parts = [f"{c['train']}/{c['val']}/{c['test']} {unit}" for unit, c in profile.items()
             if isinstance(c, dict) and {"train", "val", "test"} <= c.keys()]
    if "seed" in profile:
        parts.append(f"seed {profile['seed']}")
    line = f"Reproduced on: {name}" + (f" ({', '.join(parts)})" if parts else "")
    if profile["synthetic"]:
        line += f" — synthetic data, not {dataset}: compare orderings, not absolute values"
    return f"**{line}**"


class Results:
    """Our metrics files per variant, each read once; a variant's metrics of one split (`test`, or a table's
    `real_split`) are None while it is pending."""

    def __init__(self, metrics_dir: Path, registered: set[str], split: str = "test"):
        self.metrics_dir, self.registered, self.split, self._cache = metrics_dir, registered, split, {}

    def metrics(self, variant: str) -> dict:
        """The whole metrics file of a registered variant (an InputError when it is missing or malformed)."""
        if self.test(variant) is None:
            raise InputError(f"{self.metrics_dir / f'{variant}.json'}: missing (no metrics of {variant!r})")
        return self._cache[variant]

    def test(self, variant: str, split: str | None = None) -> dict | None:
        """The metrics of `split` (default: this reader's) of a variant, None while it is pending."""
        split = split or self.split
        path = self.metrics_dir / f"{variant}.json"
        if variant not in self._cache:
            if variant not in self.registered or not path.is_file():
                self._cache[variant] = None
            else:
                data = read_json(path)
                if isinstance(data, dict) and data.get("variant", variant) != variant:
                    raise InputError(f"{path}: names variant {data['variant']!r}, expected {variant!r}")
                self._cache[variant] = data
        data = self._cache[variant]
        if data is None:
            return None
        if not isinstance(data, dict) or not isinstance(data.get(split), dict):
            raise InputError(f"{path}: expected an object with a {split!r} metrics mapping")
        return data[split]

    def environment_line(self) -> str | None:
        """The heading line naming the environment of every variant read so far (environment.py): one line when
        they agree, each environment with its variants when they do not; None when no variant has results."""
        shown = {v: data.get("environment") for v, data in self._cache.items() if data is not None}
        if not shown:
            return None
        groups: dict[str, list[str]] = {}
        for variant, block in shown.items():
            recorded = isinstance(block, dict) and "cpu_capability" in block
            text = environment_summary(block) if recorded else "not recorded"
            groups.setdefault(text, []).append(variant)
        if len(groups) == 1:
            runs = f"all {len(shown)} runs shown" if len(shown) > 1 else "the one run shown"
            return f"**Computed on: {next(iter(groups))}, {runs}.**"
        parts = "; ".join(f"{text}: {', '.join(sorted(variants))}" for text, variants in sorted(groups.items()))
        return f"**Computed on mixed environments: {parts}.**"


def fmt(value: float, decimals: int) -> str:
    """`value` with `decimals` decimals."""
    return f"{value:.{decimals}f}"


def decimals_of(value: float) -> int:
    """Decimals the paper printed (e.g. 70.04 keeps 2), so a transcribed number is never re-rounded."""
    text = repr(value)
    return len(text.split(".")[1]) if "." in text and "e" not in text else 0


def md_row(cells: list[str]) -> str:
    """One Markdown table row of `cells` (a `|` in a cell escaped)."""
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

