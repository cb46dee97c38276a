"""Which results files may be stale: the bench script that writes them changed after they were last written.

For each file in bench/results/ (a `.jsonl` / `.json` / `.png` goes with the `.md` of the same stem when it has no
command of its own), the `python bench/X.py` commands it carries name its scripts; the file is listed when one of them
has a commit newer than the file's last commit. A listed file is not necessarily wrong (the change may touch only how
tables are drawn), but its numbers were not made by today's script: re-run it, or say why the change leaves them.

    python bench/check_stale.py            # list them, exit 1 when any
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
SCRIPT = re.compile(r"python3? (bench/[\w/]+\.py)")


def last_commit_time(path: Path) -> int:
    out = subprocess.run(["git", "log", "-1", "--format=%ct", "--", str(path.relative_to(REPO))], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout.strip()
    return int(out) if out else 0


def commits_since(path: str, since: int) -> list[str]:
    out = subprocess.run(["git", "log", f"--since={since + 1}", "--format=%h %s", "--", path], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line]


def scripts_of(path: Path) -> set:
    """The bench scripts a results file names in its commands (its .md sibling's when it names none)."""
    for candidate in (path, path.with_suffix(".md")):
        if candidate.is_file() and candidate.suffix in (".md", ".json", ".jsonl"):
            found = set(SCRIPT.findall(candidate.read_text(encoding="utf-8", errors="replace")))
            if found:
                return found
    return set()


def stale_files() -> list[tuple[str, str, list[str]]]:
    """(results file, script, the script's commits since the file was last written)."""
    listed = []
    for path in sorted(RESULTS.iterdir()):
        written = last_commit_time(path)
        for script in sorted(scripts_of(path)):
            if (REPO / script).is_file():
                newer = commits_since(script, written)
                if newer:
                    listed.append((path.name, script, newer))
    return listed


def main() -> int:
    listed = stale_files()
    for name, script, newer in listed:
        print(f"{name}: {script} changed since ({len(newer)} commits; newest: {newer[0]})")
    print(f"{len({name for name, _, _ in listed})} results files older than a script that writes them")
    return 1 if listed else 0


if __name__ == "__main__":
    sys.exit(main())
