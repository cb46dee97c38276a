"""Peak memory of the chunked distillation loss vs the naive full-logit loss (forward + backward).

Setting: a 262,144-token vocabulary (Gemma-3's), 1,024 scored positions, a SmolLM2-sized student head
(hidden 576, vocabulary padded to 262,208 rows) and a Gemma-3-270M-sized teacher head (hidden 640). Each
measurement runs in a fresh subprocess; its peak resident memory (ru_maxrss) is compared with the resident
memory just before the loss, when the heads, the hidden states and the gradient buffer of the student head
already exist. The difference is what the loss itself costs.

    python bench/bench_distill_memory.py                 # naive vs chunk sizes 128, 256 (default), 512
    python bench/bench_distill_memory.py --chunk-sizes 256

Goal: the chunked loss at the default chunk size needs at most 30% of the naive loss's memory.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import json
import os
import resource
import subprocess
import sys
import time

VOCAB = 262_144
POSITIONS = 1024
STUDENT_HIDDEN, STUDENT_ROWS = 576, 262_208
TEACHER_HIDDEN, TEACHER_ROWS = 640, 262_144


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def naive_loss(student_logits, teacher_logits, labels, vocab_size, alpha=0.5, temperature=1.0):
    """The textbook implementation: full [batch, length, vocab] logits of both models."""
    import torch.nn.functional as F

    s, t, y = student_logits[:, :-1], teacher_logits[:, :-1], labels[:, 1:]
    mask = y != -100
    ce = F.cross_entropy(s.reshape(-1, s.shape[-1]), y.reshape(-1), ignore_index=-100, reduction="sum")
    logq = F.log_softmax(s[..., :vocab_size] / temperature, dim=-1)
    logp = F.log_softmax(t[..., :vocab_size] / temperature, dim=-1)
    kl = (F.kl_div(logq, logp, log_target=True, reduction="none").sum(-1) * mask).sum()
    return (alpha * ce + (1 - alpha) * temperature**2 * kl) / mask.sum()


def worker(mode: str, chunk_size: int) -> dict:
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(2)
    student_head = torch.nn.Linear(STUDENT_HIDDEN, STUDENT_ROWS, bias=False)
    teacher_head = torch.nn.Linear(TEACHER_HIDDEN, TEACHER_ROWS, bias=False).requires_grad_(False)
    student_head.weight.grad = torch.zeros_like(student_head.weight)  # a training step holds this anyway
    student_hidden = torch.randn(1, POSITIONS + 1, STUDENT_HIDDEN, requires_grad=True)
    teacher_hidden = torch.randn(1, POSITIONS + 1, TEACHER_HIDDEN)
    labels = torch.randint(0, VOCAB, (1, POSITIONS + 1))
    baseline_rss = _rss_mb()
    baseline_peak = _peak_mb()
    start = time.perf_counter()
    if mode == "naive":
        student_logits = student_head(student_hidden)
        with torch.no_grad():
            teacher_logits = teacher_head(teacher_hidden)
        loss = naive_loss(student_logits, teacher_logits, labels, VOCAB)
        loss.backward()
        del student_logits, teacher_logits
    else:
        from tokswap.distillation import token_distillation_loss

        out = token_distillation_loss(
            student_hidden, teacher_hidden, labels, student_head, teacher_head, VOCAB, chunk_size=chunk_size
        )
        loss = out.loss
        loss.backward()
    seconds = time.perf_counter() - start
    peak = _peak_mb()
    return {
        "mode": mode,
        "chunk_size": chunk_size if mode == "chunked" else None,
        "loss": float(loss),
        "baseline_mb": round(baseline_rss, 1),
        "peak_mb": round(peak, 1),
        "loss_memory_mb": round(peak - max(baseline_rss, 0.0), 1),
        "setup_peak_mb": round(baseline_peak, 1),
        "seconds": round(seconds, 2),
    }


def run_in_subprocess(mode: str, chunk_size: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", mode, "--chunk-size", str(chunk_size)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", choices=["naive", "chunked"], help=argparse.SUPPRESS)
    parser.add_argument("--chunk-size", type=int, default=256, help=argparse.SUPPRESS)
    parser.add_argument("--chunk-sizes", default="128,256,512", help="comma-separated chunk sizes to measure")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--output", default="bench/results/distill_memory.md", help="markdown file for the printed results and the command")
    args = parser.parse_args(argv)
    lines = []

    def say(text: str, **kwargs) -> None:
        print(text, **kwargs)
        lines.append(text)

    if args.worker:
        print(json.dumps(worker(args.worker, args.chunk_size)))
        return 0

    say(f"vocab {VOCAB}, {POSITIONS} positions, student {STUDENT_HIDDEN}x{STUDENT_ROWS}, teacher {TEACHER_HIDDEN}x{TEACHER_ROWS}")
    naive = run_in_subprocess("naive", 0)
    rows = [naive]
    for chunk_size in (int(c) for c in args.chunk_sizes.split(",")):
        rows.append(run_in_subprocess("chunked", chunk_size))
    say(f"{'method':<22}{'loss memory (MB)':>18}{'ratio':>8}{'process peak (MB)':>19}{'ratio':>8}{'time (s)':>10}{'loss':>12}")
    for row in rows:
        name = "naive (full logits)" if row["mode"] == "naive" else f"chunked, chunk={row['chunk_size']}"
        ratio = row["loss_memory_mb"] / naive["loss_memory_mb"]
        row["ratio_to_naive"] = round(ratio, 3)
        peak_ratio = row["peak_mb"] / naive["peak_mb"]
        say(f"{name:<22}{row['loss_memory_mb']:>18.0f}{ratio:>8.1%}{row['peak_mb']:>19.0f}{peak_ratio:>8.1%}"
            f"{row['seconds']:>10.2f}{row['loss']:>12.5f}")
    default = next((r for r in rows if r.get("chunk_size") == 256), None)
    if default is not None:
        verdict = "meets" if default["ratio_to_naive"] <= 0.30 else "MISSES"
        say(f"default chunk (256): {default['ratio_to_naive']:.1%} of naive -> {verdict} the <= 30% goal")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)
    command = "python " + " ".join(["bench/" + os.path.basename(__file__), *(argv if argv is not None else sys.argv[1:])])
    Path(args.output).write_text("# Chunked distillation loss memory vs naive (bench/bench_distill_memory.py)\n\nCommand:\n\n    " + command + "\n\n```\n" + "\n".join(lines) + "\n```\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
