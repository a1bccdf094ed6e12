#!/usr/bin/env python3
"""Checks that docs/exec-protocol.md names every name of the exec trainer protocol.

The names (environment variables, lines a trainer writes, schema metadata keys)
are the string constants of src/trainer/exec/protocol.rs, which
python/sluice_trainer/sluice_trainer/_protocol.py repeats; a page that leaves
one out, or still names one the code no longer has, fails with the name.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = ROOT / "src/trainer/exec/protocol.rs"
PAGE = ROOT / "docs/exec-protocol.md"


def code_names():
    """Every string the protocol's constants hold (lists of strings included)."""
    text = CODE.read_text(encoding="utf-8")
    consts = re.findall(r"pub const \w+: (?:&str|\[&str; \d+\]) = (.*);", text)
    names = {n for c in consts for n in re.findall(r'"([^"]+)"', c)}
    return {n.strip() for n in names if n != "sluice."}


def page_names(page):
    """The names in the first column of the page's table of names."""
    return {m.strip() for m in re.findall(r"^\| `([^`]+)` \|", page, re.M)}


def main():
    names = code_names()
    page = PAGE.read_text(encoding="utf-8")
    shown = page_names(page)
    missing = sorted(names - shown)
    stale = sorted(shown - names)
    for n in missing:
        print(f"docs/exec-protocol.md: does not name `{n}` ({CODE.relative_to(ROOT)})")
    for n in stale:
        print(f"docs/exec-protocol.md: names `{n}`, which {CODE.relative_to(ROOT)} does not have")
    print(f"{len(names) - len(missing)} of {len(names)} protocol names documented")
    return 1 if missing or stale else 0


if __name__ == "__main__":
    sys.exit(main())
