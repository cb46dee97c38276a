"""Time and peak memory of the embedding surgery on a 1B-parameter model.

A Pythia-1B-shaped GPT-NeoX (random float32 weights, untied embeddings, vocab 50304) is given the
Qwen2.5 tokenizer (151665 tokens, padded to 151680) with the `tokalign` init. The alignment maps
byte-identical tokens directly and makes every other token a FALLBACK row (mean of its source
pieces), the most expensive path of the init. One run; prints time and peak RSS.

    python bench/bench_surgery.py [--target qwen2.5] [--init-method tokalign]
    python bench/bench_surgery.py --summarize RUN1.md RUN2.md ... --output SUMMARY.md   # mean ± std over runs

Goals (issue 4): under 15 s, peak memory under 1.5x the model's size.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import os
import sys
import threading
import time

import numpy as np
import torch

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * PAGE


class PeakRSS:
    """Samples the process RSS every `interval` seconds in a thread; `.peak` is the largest seen."""

    def __init__(self, interval: float = 0.005):
        self.interval, self.peak, self._stop = interval, rss_bytes(), threading.Event()

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            time.sleep(self.interval)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def pythia_1b(seed: int = 0):
    """Pythia-1B's shape with random float32 weights, every page touched (so RSS counts it)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(
        vocab_size=50304, hidden_size=2048, num_hidden_layers=16, num_attention_heads=8, intermediate_size=8192,
        rotary_pct=0.25, max_position_embeddings=2048, tie_word_embeddings=False, use_parallel_residual=True,
        bos_token_id=0, eos_token_id=0,
    )
    with torch.device("meta"):
        model = GPTNeoXForCausalLM(config)
    model = model.to_empty(device="cpu").float()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.02, generator=generator)
    return model.eval()


def neox_to_target_alignment(source_tokenizer, target_tokenizer):
    from tokswap.alignment import RowSource, TokenAlignment, tokenizer_fingerprint
    from tokswap.init_methods import source_pieces

    source_vocab = source_tokenizer.get_vocab()
    n = len(target_tokenizer)
    target_to_source = np.zeros(n, dtype=np.int64)
    codes = np.full(n, RowSource.FALLBACK, dtype=np.int8)
    for token, target_id in target_tokenizer.get_vocab().items():
        if token in source_vocab and target_id < n:
            target_to_source[target_id], codes[target_id] = source_vocab[token], RowSource.IDENTICAL
    fallback = np.flatnonzero(codes == RowSource.FALLBACK)
    piece_indptr, pieces = source_pieces(source_tokenizer, target_tokenizer, fallback, len(source_tokenizer))
    lengths = np.zeros(n, dtype=np.int64)
    lengths[fallback] = np.diff(piece_indptr)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return TokenAlignment(
        target_to_source=target_to_source, row_sources=codes, fallback_indptr=indptr, fallback_indices=pieces,
        config={"source_tokenizer": tokenizer_fingerprint(source_tokenizer),
                "target_tokenizer": tokenizer_fingerprint(target_tokenizer)},
    )


def model_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="qwen2.5")
    parser.add_argument("--init-method", default="tokalign")
    parser.add_argument("--output", default="bench/results/surgery_run1.md", help="markdown file for the printed results and the command")
    parser.add_argument("--summarize", nargs="+", default=None, metavar="RUN.md",
                        help="average several runs' reports into --output instead of running")
    args = parser.parse_args(argv)
    if args.summarize:
        from report_average import average_report_groups

        argv = argv if argv is not None else sys.argv[1:]
        text = average_report_groups(args.summarize, "python bench/bench_surgery.py " + " ".join(argv))
        Path(args.output).write_text(text, encoding="utf-8")
        print(text)
        return 0
    lines = []

    def say(text: str, **kwargs) -> None:
        print(text, **kwargs)
        lines.append(text)

    from tokswap.loading import load_tokenizer

    from tokswap.offline import assets
    from tokswap.surgery import swap_vocabulary

    source_tokenizer, target_tokenizer = load_tokenizer("gpt-neox"), load_tokenizer(args.target)
    alignment = neox_to_target_alignment(source_tokenizer, target_tokenizer)
    say(f"alignment: {alignment.counts_by_row_source()}", flush=True)
    model = pythia_1b()
    size_before = model_bytes(model)
    n_params = sum(p.numel() for p in model.parameters())
    rss_before = rss_bytes()
    say(f"model: {n_params / 1e9:.3f} B parameters, {size_before / 2**30:.2f} GiB float32; "
          f"RSS before surgery {rss_before / 2**30:.2f} GiB", flush=True)

    with PeakRSS() as peak:
        started, cpu_started = time.perf_counter(), time.process_time()
        swap_vocabulary(model, alignment, target_tokenizer, init_method=args.init_method,
                        source_tokenizer=source_tokenizer)
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    size_after = model_bytes(model)
    other = rss_before - size_before  # interpreter, torch, tokenizers, alignment
    say(f"surgery ({args.init_method}, {alignment.num_target_rows} -> {model.config.vocab_size} rows): {seconds:.1f} s "
          f"wall, {cpu_seconds:.1f} s CPU (goal < 15 s); load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    say(f"model size: before {size_before / 2**30:.2f} GiB, after {size_after / 2**30:.2f} GiB")
    say(f"peak RSS during surgery: {peak.peak / 2**30:.2f} GiB = {peak.peak / size_before:.2f}x the source model, "
          f"{peak.peak / size_after:.2f}x the swapped model (goal < 1.5x)")
    say(f"peak RSS minus the non-model baseline ({other / 2**30:.2f} GiB): {(peak.peak - other) / 2**30:.2f} GiB = "
          f"{(peak.peak - other) / size_before:.2f}x the source model, {(peak.peak - other) / size_after:.2f}x the swapped model")
    say(f"extra memory of the surgery over the final model: {(peak.peak - other - size_after) / 2**30:.2f} GiB "
          f"(the old embedding matrices are {2 * 50304 * 2048 * 4 / 2**30:.2f} GiB)")
    command = "python " + " ".join(["bench/" + os.path.basename(__file__), *(argv if argv is not None else sys.argv[1:])])
    Path(args.output).write_text("# Embedding surgery on a 1B-parameter model (bench/bench_surgery.py)\n\nCommand:\n\n    " + command + "\n\n```\n" + "\n".join(lines) + "\n```\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
