"""Average several runs' markdown reports of one timing bench into one report with mean ± std.

The runs must be the same command (their `Command:` lines may differ only in the output path) and print the
same text apart from the numbers: each number that differs between runs becomes `mean ± std` (sample standard
deviation, as many decimals as the runs printed); numbers equal in every run are kept as printed. A line whose
words differ between runs is an error: the reports are not runs of one bench.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?")
OUTPUT_FLAGS = re.compile(r"\s--(?:results|output)[ =][^\s`]+")
COMMAND = re.compile(r"python bench/[^`\n]*")


def _decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def _average_line(lines: list) -> str:
    """One line of the report with each number that differs between runs replaced by `mean ± std`."""
    skeletons = {NUMBER.sub("#", line) for line in lines}
    if len(skeletons) != 1:
        raise ValueError("runs differ beyond their numbers:\n" + "\n".join(lines))
    numbers = [NUMBER.findall(line) for line in lines]
    parts = NUMBER.split(lines[0])
    out = [parts[0]]
    for index, printed in enumerate(numbers[0]):
        column = [run[index] for run in numbers]
        if len(set(column)) == 1:
            out.append(printed)
        else:
            values = [float(v.replace(",", "")) for v in column]
            places = max(_decimals(v) for v in column)
            out.append(f"{statistics.mean(values):.{places}f} ± {statistics.stdev(values):.{places}f}")
        out.append(parts[index + 1])
    return "".join(out)


def average_reports(paths: list, command: str) -> str:
    """The reports at `paths` averaged line by line, headed by `command` and the runs' own command lines."""
    if len(paths) < 2:
        raise ValueError("give at least two runs to average")
    texts = [Path(p).read_text(encoding="utf-8").splitlines() for p in paths]
    if len({len(t) for t in texts}) != 1:
        raise ValueError(f"the reports have different lengths: {[len(t) for t in texts]} lines")
    averaged = []
    for lines in zip(*texts):
        lines = [OUTPUT_FLAGS.sub("", line) for line in lines]
        if len({tuple(COMMAND.findall(line)) for line in lines}) != 1:
            raise ValueError("the runs are different commands:\n" + "\n".join(lines))
        averaged.append(_average_line(lines))
    header = [
        f"Averaged by `{command}` over {len(paths)} runs of one command "
        f"({', '.join(Path(p).name for p in paths)}): each number that differs between runs is the mean ± the sample "
        "standard deviation over the runs.",
    ]
    return "\n".join(averaged[:1] + [""] + header + averaged[1:]) + "\n"


def _command_of(path) -> str:
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        found = COMMAND.findall(OUTPUT_FLAGS.sub("", line))
        if found:
            return found[0]
    raise ValueError(f"{path}: no `python bench/...` command line")


def average_report_groups(paths: list, command: str) -> str:
    """Runs grouped by their command, each group averaged (`average_reports`) under a heading naming it."""
    groups: dict = {}
    for path in paths:
        groups.setdefault(_command_of(path), []).append(path)
    title = OUTPUT_FLAGS.sub("", Path(paths[0]).read_text(encoding="utf-8").splitlines()[0])
    sections = [title, ""]
    for run_command, members in groups.items():
        body = average_reports(members, command).splitlines()[1:]
        sections += [f"## `{run_command.strip()}`", *body, ""]
    return "\n".join(sections).rstrip() + "\n"
