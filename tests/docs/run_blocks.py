#!/usr/bin/env python3
"""Runs every runnable shell block of the docs and checks the output they show.

A block is runnable when the line before its fence (blank lines aside) is the
HTML comment `<!-- runnable -->` and its fence is ```sh or ```bash:

    <!-- runnable -->
    ```sh
    sluice ls examples/clicks
    ```

    ```text title="output"
    ...
    ```

A ```text title="output"``` block right after it (blank lines aside) is what
the block prints (stdout and stderr together): each of its lines must match a
line of the output in order, where a line `...` stands for any number of lines
and `...` inside a line for any text; trailing spaces are ignored.

Each block runs with `bash -euo pipefail` in a fresh temporary directory that
holds a copy of examples/ and jobs/, with `sluice` on the PATH: $SLUICE_BIN,
else target/debug/sluice under $CARGO_TARGET_DIR (or ./target). A failing
block is reported with its file and line.

Usage: tests/docs/run_blocks.py [FILE.md ...]   (default: README.md and docs/**/*.md)
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- runnable -->"
RUN_FENCE = re.compile(r"^```(sh|bash)\s*$")
OUTPUT_FENCE = re.compile(r'^```text\s+title="output"\s*$')
TIMEOUT_S = 300


class Block:
    """One runnable block: where it is, its script and the output it shows."""

    def __init__(self, path, line, script, expected):
        self.path = path
        self.line = line
        self.script = script
        self.expected = expected

    def where(self):
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fence_body(lines, start):
    """The lines of the fence opened at lines[start], and the index after it."""
    body = []
    i = start + 1
    while i < len(lines) and not lines[i].startswith("```"):
        body.append(lines[i])
        i += 1
    if i == len(lines):
        raise SystemExit(f"unclosed fence opened at line {start + 1}")
    return body, i + 1


def next_nonblank(lines, i):
    while i < len(lines) and not lines[i].strip():
        i += 1
    return i


def blocks_of(path):
    """Every runnable block of one Markdown file."""
    lines = path.read_text(encoding="utf-8").split("\n")
    found = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^(`{3,})", lines[i])
        if fence:  # a block not marked runnable (or a page showing the mark itself)
            i += 1
            while i < len(lines) and not lines[i].startswith(fence.group(1)):
                i += 1
            i += 1
            continue
        if lines[i].strip() != MARK:
            i += 1
            continue
        j = next_nonblank(lines, i + 1)
        if j == len(lines) or not RUN_FENCE.match(lines[j]):
            raise SystemExit(f"{path.relative_to(ROOT)}:{i + 1}: {MARK} is not followed by a ```sh or ```bash block")
        script, after = fence_body(lines, j)
        expected = None
        k = next_nonblank(lines, after)
        if k < len(lines) and OUTPUT_FENCE.match(lines[k]):
            expected, after = fence_body(lines, k)
        found.append(Block(path, j + 1, "\n".join(script) + "\n", expected))
        i = after
    return found


def line_matches(pattern, line):
    parts = [re.escape(p) for p in pattern.rstrip().split("...")]
    return re.fullmatch(".*".join(parts), line.rstrip()) is not None


def output_matches(expected, actual):
    """Whether the output lines match the shown lines (`...` wildcards)."""
    memo = {}

    def match(e, a):
        if (e, a) in memo:
            return memo[(e, a)]
        if e == len(expected):
            ok = a == len(actual) or all(not x.strip() for x in actual[a:])
        elif expected[e].strip() == "...":
            ok = any(match(e + 1, b) for b in range(a, len(actual) + 1))
        else:
            ok = a < len(actual) and line_matches(expected[e], actual[a]) and match(e + 1, a + 1)
        memo[(e, a)] = ok
        return ok

    return match(0, 0)


def sluice_bin():
    given = os.environ.get("SLUICE_BIN")
    if given:
        return Path(given).resolve()
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return (target / "debug" / "sluice").resolve()


def run(block, binary):
    """Runs one block; returns None when it passes, else what went wrong."""
    with tempfile.TemporaryDirectory(prefix="sluice-docs-") as tmp:
        for data in ("examples", "jobs"):
            shutil.copytree(ROOT / data, Path(tmp) / data)
        bindir = Path(tmp) / ".bin"
        bindir.mkdir()
        (bindir / "sluice").symlink_to(binary)
        env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
        try:
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", block.script],
                cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"did not finish within {TIMEOUT_S} s"
        if done.returncode != 0:
            return f"exit code {done.returncode}; output:\n{done.stdout}"
        if block.expected is not None and not output_matches(block.expected, done.stdout.split("\n")):
            shown = "\n".join(block.expected)
            return f"output differs from the page's.\n--- shown:\n{shown}\n--- got:\n{done.stdout}"
    return None


def main(argv):
    binary = sluice_bin()
    if not binary.is_file():
        print(f"run_blocks.py: no sluice binary at {binary} (build it, or set SLUICE_BIN)", file=sys.stderr)
        return 1
    files = [Path(a).resolve() for a in argv] or [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    blocks = [b for f in files for b in blocks_of(f)]
    failed = 0
    for block in blocks:
        problem = run(block, binary)
        if problem is None:
            print(f"ok    {block.where()}")
        else:
            failed += 1
            print(f"FAIL  {block.where()}: {problem}")
    print(f"{len(blocks) - failed} of {len(blocks)} runnable blocks passed")
    return 1 if failed or not blocks else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
