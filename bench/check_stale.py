"""Which results files may be stale: the bench script that writes them changed after they were last written.

For each file in bench/results/ (a `.jsonl` / `.json` / `.png` goes with the `.md` of the same stem when it has no
command of its own), the `python bench/X.py` commands it carries name its scripts; the file is listed when one of them
has a commit newer than the file's last commit. A file made from another results file (`from `leaderboard.jsonl``
in its header) is listed too when that file was committed after it, unless `--record` noted a byte-identical re-run
since. A listed file is not necessarily wrong (the change may touch only how
tables are drawn), but its numbers were not made by today's script: re-run it, or say why the change leaves them.

A re-run that writes the file byte for byte as it was leaves git nothing to commit, so the file would stay listed.
`--record FILE ...` notes in bench/results_reruns.json the file's sha256 and the commit of each script it names; the
file counts as current while both still match. A script commit that changes no measured number (a new summary table,
a renamed flag) is named, with why, under "unaffected_commits" in the same file, and is not counted.

    python bench/check_stale.py                            # list them, exit 1 when any
    python bench/check_stale.py --record bench/results/X.md  # after a re-run that changed nothing in X.md
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
RERUNS = REPO / "bench" / "results_reruns.json"
SCRIPT = re.compile(r"python3? (bench/[\w/]+\.py)")
READS = re.compile(r"from `([\w.]+\.jsonl?)`")


def last_commit_time(path: Path) -> int:
    out = subprocess.run(
        ["git", "log", "-1", "--format=%ct", "--", str(path.relative_to(REPO))],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return int(out) if out else 0


def commits_since(path: str, since: int, unaffected=()) -> list[str]:
    """The script's commits after `since` ("short-hash subject"), leaving out those named as changing no number."""
    out = subprocess.run(
        ["git", "log", f"--since={since + 1}", "--format=%H %s", "--", path],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    commits = [line.split(" ", 1) for line in out.splitlines() if line]
    return [f"{full[:7]} {subject}" for full, subject in commits if not any(full.startswith(u) for u in unaffected)]


def last_commit(path: str) -> str:
    return subprocess.run(
        ["git", "log", "-1", "--format=%H", "--", path], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ledger() -> dict:
    """{"reruns": {file: {"sha256", "scripts": {script: commit}}}, "unaffected_commits": {commit: why}}."""
    data = json.loads(RERUNS.read_text(encoding="utf-8")) if RERUNS.is_file() else {}
    return {"reruns": data.get("reruns", {}), "unaffected_commits": data.get("unaffected_commits", {})}


def rerun_is_current(path: Path, script: str, reruns: dict) -> bool:
    """A recorded byte-identical re-run: the file is as recorded and the script has not changed since."""
    entry = reruns.get(path.name)
    return bool(entry) and entry.get("sha256") == sha256(path) and entry["scripts"].get(script) == last_commit(script)


def record(paths: list) -> int:
    """Note byte-identical re-runs of `paths` (their sha256, their scripts' commits) in bench/results_reruns.json."""
    data = ledger()
    reruns = data["reruns"]
    for name in paths:
        path = Path(name).resolve()
        if path.parent != RESULTS or not path.is_file():
            print(f"error: {name} is not a file in bench/results/", file=sys.stderr)
            return 2
        scripts = sorted(scripts_of(path))
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--", str(path), *scripts],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not scripts or changed:
            print(
                f"error: {path.name}: "
                + (
                    "it names no bench script"
                    if not scripts
                    else f"commit first, the file or a script has uncommitted changes ({changed.splitlines()[0]})"
                ),
                file=sys.stderr,
            )
            return 2
        reruns[path.name] = {"sha256": sha256(path), "scripts": {script: last_commit(script) for script in scripts},
                             "inputs": {name: last_commit(f"bench/results/{name}") for name in inputs_of(path)}}
        print(f"recorded {path.name}")
    data["reruns"] = dict(sorted(reruns.items()))
    RERUNS.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


def scripts_of(path: Path) -> set:
    """The bench scripts a results file names in its commands (its .md sibling's when it names none)."""
    for candidate in (path, path.with_suffix(".md")):
        if candidate.is_file() and candidate.suffix in (".md", ".json", ".jsonl"):
            found = set(SCRIPT.findall(candidate.read_text(encoding="utf-8", errors="replace")))
            if found:
                return found
    return set()


def inputs_of(path: Path) -> list:
    """The other results files a results file's header says it is made from."""
    if path.suffix != ".md":
        return []
    names = set(READS.findall(path.read_text(encoding="utf-8", errors="replace")))
    return sorted(name for name in names if Path(name).stem != path.stem and (RESULTS / name).is_file())


def stale_inputs() -> list[tuple[str, str]]:
    """(results file, another results file it is made from that was committed after it, with no recorded re-run)."""
    listed, reruns = [], ledger()["reruns"]
    for path in sorted(RESULTS.glob("*.md")):
        entry = reruns.get(path.name, {})
        recorded = entry.get("inputs", {}) if entry.get("sha256") == sha256(path) else {}
        for name in inputs_of(path):
            newer = last_commit_time(RESULTS / name) > last_commit_time(path)
            if newer and recorded.get(name) != last_commit(f"bench/results/{name}"):
                listed.append((path.name, name))
    return listed


def stale_files() -> list[tuple[str, str, list[str]]]:
    """(results file, script, the script's commits since the file was last written)."""
    listed, data = [], ledger()
    for path in sorted(RESULTS.iterdir()):
        written = last_commit_time(path)
        for script in sorted(scripts_of(path)):
            if (REPO / script).is_file():
                newer = commits_since(script, written, data["unaffected_commits"])
                if newer and not rerun_is_current(path, script, data["reruns"]):
                    listed.append((path.name, script, newer))
    return listed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", nargs="+", metavar="FILE", help="record byte-identical re-runs of these files")
    args = parser.parse_args()
    if args.record:
        return record(args.record)
    listed = stale_files()
    for name, script, newer in listed:
        print(f"{name}: {script} changed since ({len(newer)} commits; newest: {newer[0]})")
    print(f"{len({name for name, _, _ in listed})} results files older than a script that writes them")
    inputs = stale_inputs()
    for name, source in inputs:
        print(f"{name}: made from {source}, which changed since: re-run its script")
    print(f"{len(inputs)} results files older than a results file they are made from")
    return 1 if listed or inputs else 0


if __name__ == "__main__":
    sys.exit(main())
