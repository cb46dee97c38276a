"""Which decimal numbers in README.md and bench/RESULTS.md no file in bench/results/ holds.

    python bench/check_published.py            # lists the untraced numbers, exit 1 if there are any
    python bench/check_published.py --cited    # stricter: a paragraph's decimals must be in the files it names

It also lists results files with no command that made them: a file is covered when it, or a file of the same name
with another suffix, holds a `python bench/...` command, or when a paragraph of README.md or bench/RESULTS.md names it
together with one.

A published number with d decimals is traced when some number in a results file (markdown, JSON, JSONL) rounds to
it at d decimals, as itself or x100 (a fraction published as a percentage). Integers and version-like strings are
not checked: they are counts, settings and names more often than measurements. A traced number can still be the
wrong one; an untraced one has no source at all.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = [REPO / "README.md", REPO / "bench" / "RESULTS.md"]
RESULTS = REPO / "bench" / "results"
# Published numbers computed from traced ones (differences, unit changes), each with the sum that gives it.
DERIVED = {
    "0.043": "output rows fitted, 200 steps, seeds 2, 3: the default 1.563 - 1.520 (leaderboard.md)",
    "0.04": "output rows fitted, 200 steps, seeds 2, 3: the default 1.563 - 1.520, rounded (leaderboard.md)",
    "59.5": "output rows fitted, 200 steps, seeds 2, 3: (1.885 - 1.520) / (1.885 - 1.272) (leaderboard.md)",
    "0.013": "prediction term, 200 steps, seeds 2, 3: the default 1.563 - 1.550 (leaderboard.md); sparse embedding "
    "updates, seed 3: 1.574 - the default 1.561 (leaderboard.jsonl)",
    "0.012": "sparse embedding updates, 200 steps, seed 2: 1.576 - the default 1.564 (leaderboard.jsonl); English, "
    "seeds 2 and 3: the default 0.982 - 0.970 (leaderboard.md)",
    "0.106": "output rows fitted, right after the swap: 1.885 - 1.779 (leaderboard.md)",
    "0.11": "output rows fitted on the corpus, right after the swap: 1.885 - 1.779 (leaderboard.md)",
    "0.08": "output rows fitted, 50 steps: the default 1.700 - 1.615, rounded (leaderboard.jsonl, seeds 2, 3)",
    "0.084": "output rows fitted, 50 steps: the default 1.700 - 1.615 on seeds 2, 3 (leaderboard.jsonl)",
    "0.086": "output rows fitted, 25 steps: the default 1.739 - 1.653 on seeds 2, 3 (leaderboard.jsonl)",
    "44.0": "output rows fitted, 50 steps: (1.885 - 1.615) / (1.885 - 1.272) (leaderboard.md)",
    "30.2": "the default at 50 steps, seeds 2, 3: (1.885 - 1.700) / (1.885 - 1.272) (leaderboard.jsonl)",
    "0.056": "20 cross-entropy steps, fvt 1.9472 - fvt_scaled 1.8912, means of 2 seeds (self_distill.md)",
    "0.2": "self-distillation with task-near text, seed 3: ARC-Easy -3.2 against the 3-point goal (leaderboard.md)",
    "0.015": "fvt vs fvt_scaled with the short stage 1 at 50 steps, 1.756 - 1.741 (leaderboard.md)",
    "0.021": "largest |tokalign - fvt| right after the swap: tokalign 1.910 - fvt 1.889 on gemma3 (leaderboard.md)",
    "10.8": "similarity 0.934 - 0.826, gpt-neox -> gemma3, in points (alignment.md)",
    "14.4": "num_bytes 14431914 in MB (alignment.md)",
    "0.10": "gpt-neox right after the swap, tokalign 2.025 - fvt_scaled 1.925 (leaderboard.md)",
    "0.007": "gpt-neox right after the swap, fvt 2.032 - tokalign 2.025 (leaderboard.md)",
    "0.119": "fvt - fvt_scaled after the swap: qwen2.5 on the 20 kB set 2.034 - 1.915; gemma3 on the 4 kB set 1.889 - 1.770 "
    "(leaderboard.md)",
    "0.151": "fvt - fvt_scaled after the swap, llama3, 20 kB set: 2.144 - 1.993 (leaderboard.md)",
    "0.124": "fvt - fvt_scaled after the swap, gemma3, 20 kB set: 1.934 - 1.810 (leaderboard.md)",
    "0.111": "fvt - fvt_scaled after the swap, gpt-neox, 20 kB set: 2.138 - 2.027 (leaderboard.md)",
    "0.121": "fvt - fvt_scaled after the swap, qwen2.5, 4 kB set: 2.006 - 1.885 (leaderboard.md)",
    "0.150": "fvt - fvt_scaled after the swap, llama3, 4 kB set: 2.103 - 1.953 (leaderboard.md)",
    "0.107": "fvt - fvt_scaled after the swap, gpt-neox, 4 kB set: 2.032 - 1.925 (leaderboard.md)",
    "0.0012": "demo after training, seed 1 1.7943 - seed 0 1.7931 (demo_run_seed1.md, demo_run.md)",
    "15.4": "gap closed 44.0% (stage 2 at 5e-5) - 28.6% (the paper's split), means of 2 seeds, at 200 steps (leaderboard.md)",
    "0.052": "1.793 - 1.741 at 50 steps; 1.615 - 1.563 at 200 steps, means (leaderboard.md)",
    "3.5": "ARC-Easy 0.500 - 0.465 at 200 steps, in points (leaderboard.md); code agreement at T = 1 52.1% - T = 2 "
    "48.6%, seed 0; prose lift of distillation 58.3% - 54.8% (draft_agreement_seeds.md)",
    "1.9": "prose agreement at T = 1 57.5% - T = 2 55.6%, seed 0 (draft_agreement_seeds.md)",
    "2.3": "code agreement, forward KL 51.1% - reverse KL 48.8%, means of 2 seeds (draft_agreement_seeds.md)",
    "1.5": "code agreement, forward KL 51.1% - JSD 49.6%, means of 2 seeds (draft_agreement_seeds.md)",
    "0.004": "50 steps, seed 2: cross-entropy 1.70501 - self-distillation 1.70120 (leaderboard.jsonl)",
    "0.005": "50 steps, seed 3: cross-entropy 1.69468 - self-distillation 1.68974 (leaderboard.jsonl)",
    "13.7": "code agreement, forward KL 51.1% (mean of 2 seeds) - not distilled 37.4% (draft_agreement_seeds.md)",
    "4.2": "PIQA 0.655 - 0.613 at 200 steps, in points (leaderboard.md)",
    "3.4": "one standard error of an accuracy near 0.62 on 200 questions: sqrt(0.62 * 0.38 / 200), in points; "
    "agreement at T = 1 - T = 2, seed 1: code 50.1% - 46.7%, prose 59.1% - 55.7% (draft_agreement_seeds.md)",
    "0.095": "1.710 (the paper's split) - 1.615 (stage 2 at 5e-5), means of 2 seeds, at 200 steps (leaderboard.md)",
    "0.037": "training 1.741 - 1.704 at 50 steps (leaderboard.md)",
    "1.39": "random 3.552 - TokAlign 2.165 after 36 steps, seed 0 (training_bench.json)",
    "1.24": "random 3.439 - TokAlign 2.196 after 36 steps, seed 1 (training_bench_seed1.json)",
    "0.03": "TokAlign after stage 2, 2.196 - 2.165 across seeds (training_bench*.json)",
    "0.11": "random after stage 2, 3.552 - 3.439 across seeds (training_bench*.json)",
    "12.3": "code acceptance at one draft token, distilled 59.5% - UAG 47.2% (draft.md)",
    "7.1": "code acceptance at two draft tokens, distilled 50.9% - UAG 43.8% (draft.md)",
    "4.9": "code acceptance at three draft tokens, distilled 43.6% - UAG 38.7% (draft.md)",
    "13.3": "code acceptance at one draft token in bfloat16, distilled 60.5% - UAG 47.2% (draft_bf16_runs.md)",
    "0.09": "best code speed-up in run 1, 16,384-token draft 1.41x - UAG 1.32x (draft_bf16_runs.md)",
    "0.14": "best code speed-up in run 2, 16,384-token draft 1.46x - UAG 1.32x (draft_bf16_runs.md)",
    "0.27": "best code speed-up in run 3, 16,384-token draft 1.51x - UAG 1.24x (draft_bf16_runs.md)",
    "1.7": "BLEU-1 over byte-identical + random rows, smollm2 -> qwen2.5: 0.6263 - 0.6093, in points (alignment.md)",
    "2.8": "BLEU-1 over byte-identical + random rows, gpt-neox -> qwen2.5: 0.6374 - 0.6093, in points (alignment.md)",
    "2.9": "BLEU-1 over byte-identical + random rows, gpt-neox -> gemma3: 0.5178 - 0.4888, in points (alignment.md)",
    "4.6": "similarity over byte-identical + random rows, smollm2 -> qwen2.5: 0.9851 - 0.9395, in points (alignment.md)",
    "2.0": "memory that exists before the loss: process peak 10231 - loss memory 8211 MB (distill_memory.md)",
    "5.70": "the swapped model 5.32 GiB + one of the two old matrices (0.77 GiB together) (surgery_run.md)",
    "1.51": "5.70 / 3.77 GiB, the source model (surgery_run.md)",
    "0.05": "0.052 (1.793 - 1.741 at 50 steps, leaderboard.md), to one figure",
    "0.077": "held-out KL, plain CE 2.181 - CE + KL 2.104, seed 0 (distill_gemma.json)",
    "0.090": "held-out KL, plain CE 2.152 - CE + KL 2.062, seed 1 (distill_gemma_seed1.json)",
}
DECIMAL = re.compile(r"(?<![\w.])-?\d+\.\d+(?=x\b|(?![\w.]))")  # "1.41x" (a speed-up) counts too


def result_values() -> list[float]:
    values = []
    for path in sorted(RESULTS.iterdir()):
        if path.suffix in (".md", ".json", ".jsonl"):
            values += [float(m.replace(",", "")) for m in re.findall(r"-?\d[\d,]*\.?\d*(?:e-?\d+)?", path.read_text())
                       if m.replace(",", "").replace(".", "").lstrip("-").isdigit() or "e" in m]
    return values


def untraced(text: str, values: list[float]) -> list[str]:
    roundings = {}
    missing = []
    for match in DECIMAL.finditer(text):
        literal = match.group()
        decimals = len(literal.split(".")[1])
        if decimals not in roundings:
            roundings[decimals] = {round(v, decimals) for v in values} | {round(v * 100, decimals) for v in values}
        if literal in DERIVED:
            continue
        if round(float(literal), decimals) not in roundings[decimals] and abs(float(literal)) not in roundings[decimals]:
            line = text.count("\n", 0, match.start()) + 1
            missing.append(f"{line}: {literal}")
    return missing


COMMAND = re.compile(r"python bench/\w+\.py")


def uncommanded() -> list[str]:
    """Results files (not images) whose making command is neither in them, nor in a same-named sibling, nor in a
    published paragraph that names them."""
    paragraphs = [p for path in PUBLISHED for p in re.split(r"\n\s*\n", path.read_text())]
    cited = [p for p in paragraphs if COMMAND.search(p)]
    missing = []
    for path in sorted(RESULTS.iterdir()):
        if path.suffix not in (".md", ".json", ".jsonl"):
            continue
        siblings = [p for p in RESULTS.glob(path.stem + ".*") if p.suffix in (".md", ".json", ".jsonl")]
        if any(COMMAND.search(p.read_text()) for p in siblings):
            continue
        if not any(path.name in p for p in cited):
            missing.append(path.name)
    return missing


CITED_FILE = re.compile(r"results/([\w.-]+\.(?:md|jsonl|json))")


def values_of(paths) -> list[float]:
    values = []
    for path in paths:
        values += [float(m.replace(",", "")) for m in re.findall(r"-?\d[\d,]*\.?\d*(?:e-?\d+)?", path.read_text())
                   if m.replace(",", "").replace(".", "").lstrip("-").isdigit() or "e" in m]
    return values


def traced_elsewhere(text: str) -> list[str]:
    """Stricter: in a paragraph (or table row) that names results files, decimals that none of the named files (nor
    their same-named siblings) holds: traced to some file, but not to the one the reader is sent to."""
    out = []
    offset = 0
    for block in re.split(r"(\n\s*\n|\n(?=\|))", text):
        names = set(CITED_FILE.findall(block))
        files = {q for n in names for q in RESULTS.glob(Path(n).stem + ".*") if q.suffix in (".md", ".json", ".jsonl")}
        if files:
            line0 = text.count("\n", 0, offset) + 1
            for item in untraced(block, values_of(sorted(files))):
                line, literal = item.split(": ")
                out.append(f"{line0 + int(line) - 1}: {literal} (not in {', '.join(sorted(names))})")
        offset += len(block)
    return out


def main() -> int:
    if "--cited" in sys.argv[1:]:
        found = 0
        for path in PUBLISHED:
            for item in traced_elsewhere(path.read_text()):
                print(f"{path.relative_to(REPO)}:{item}")
                found += 1
        print(f"{found} decimals in a paragraph that names results files, held by none of them", file=sys.stderr)
        return 1 if found else 0
    values = result_values()
    found = 0
    for path in PUBLISHED:
        for item in untraced(path.read_text(), values):
            print(f"{path.relative_to(REPO)}:{item}")
            found += 1
    print(f"{found} untraced decimal numbers", file=sys.stderr)
    orphans = uncommanded()
    for name in orphans:
        print(f"bench/results/{name}: no command that makes it (in it, a sibling, or beside its name)")
    print(f"{len(orphans)} results files without their command", file=sys.stderr)
    return 1 if found or orphans else 0


if __name__ == "__main__":
    sys.exit(main())
