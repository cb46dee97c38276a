"""Published numbers that are computed from other results (differences, gap shares, unit changes), re-made.

README.md and bench/RESULTS.md cite some numbers that no bench run prints itself: the difference of two arms, a share
of the gap, a size in other units. Each is listed here once, with the sum that gives it; `{x}` marks a measured value
that must be found in the results files named beside it (rounded as written, or x100 for a percentage), bare numbers
are constants. The script checks every marked value against those files, evaluates the sum, checks it rounds to the
published figure, and writes the table. A re-run that changes a source value makes it fail, so no derived figure
outlives its inputs:

    python bench/bench_derived.py           # writes bench/results/derived.md; exit 1 when a figure no longer follows
    python bench/bench_derived.py --check   # writes nothing; exit 1 also when derived.md is not what it would write
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
COMMAND = "python bench/bench_derived.py"
LB, JSONL = "leaderboard.md", "leaderboard.jsonl"
AGREE, BF16 = "draft_agreement_seeds.md", "draft_bf16_runs.md"
F32 = "draft_small_batch_matmul_runs.md"

# (published figure, sum, results files holding the marked values, what it is)
DERIVED = [
    ("44.5", "100 * ({1.885} - {1.563}) / ({1.885} - {1.162})", [LB], "the 1e-4 recipe at 200 steps: gap closed "
     "against the control's end point (the original trained by the same recipe), %"),
    ("0.043", "{1.563} - {1.520}", [LB], "output rows fitted, 200 steps, seeds 2, 3: the 1e-4 recipe minus the fit"),
    ("0.026", "{1.48042} - {1.45437}", [JSONL], "output rows fitted under the default, 200 steps, seed 2: the default "
     "minus the fit"),
    ("0.026", "{1.47966} - {1.45384}", [JSONL], "output rows fitted under the default, 200 steps, seed 3: the default "
     "minus the fit"),
    ("70.3", "100 * ({1.885} - {1.454}) / ({1.885} - {1.272})", [LB], "output rows fitted under the default, 200 "
     "steps: gap closed from the unfitted swap, %"),
    ("0.04", "{1.563} - {1.520}", [LB], "the same, to two decimals"),
    ("0.106", "{1.885} - {1.779}", [LB], "right after the swap, 4 kB set, qwen2.5: fvt_scaled minus fvt_scaled + output-row fit"),
    ("0.005", "abs({1.77914} - {1.78599}) / math.sqrt(2)", [JSONL], "output-row fit after fvt_scaled, qwen2.5, "
     "fit seeds 0 and 1: sample std of the two"),
    ("0.001", "abs({1.89593} - {1.89388}) / math.sqrt(2)", [JSONL], "output-row fit on the task-near text after "
     "fvt_scaled, qwen2.5, fit seeds 0 and 1: sample std of the two"),
    ("0.088", "{1.973} - {1.885}", [LB], "right after the swap, 4 kB set, qwen2.5: leading-piece output rows minus "
     "fvt_scaled"),
    ("10.0", "-({-10.0322})", [JSONL], "leading-piece run, qwen2.5: how much more likely fvt_scaled rates the new "
     "words after the generic prefixes than the original rates their pieces, nats (minus the report's gap_before)"),
    ("0.107", "{1.953} - {1.846}", [LB], "right after the swap, 4 kB set, llama3: fvt_scaled minus fvt_scaled + output-row fit"),
    ("0.071", "{1.770} - {1.699}", [LB], "right after the swap, 4 kB set, gemma3: fvt_scaled minus fvt_scaled + output-row fit"),
    ("0.109", "{1.925} - {1.816}", [LB], "right after the swap, 4 kB set, gpt-neox: fvt_scaled minus fvt_scaled + output-row fit"),
    ("0.073", "{1.915} - {1.842}", [LB], "right after the swap, 20 kB set, qwen2.5: fvt_scaled minus fvt_scaled + output-row fit"),
    ("0.073", "{1.993} - {1.920}", [LB], "right after the swap, 20 kB set, llama3: fvt_scaled minus fvt_scaled + output-row fit"),
    ("0.050", "{1.810} - {1.760}", [LB], "right after the swap, 20 kB set, gemma3: fvt_scaled minus fvt_scaled + output-row fit"),
    ("0.121", "{2.027} - {1.906}", [LB], "right after the swap, 20 kB set, gpt-neox: fvt_scaled minus fvt_scaled + output-row fit"),
    ("0.07", "{1.770} - {1.699}", [LB], "the output-row fit's smallest gain right after the swap, 4 kB set (gemma3)"),
    ("0.11", "{1.925} - {1.816}", [LB], "its largest there (gpt-neox)"),
    ("0.05", "{1.810} - {1.760}", [LB], "its smallest gain on the 20 kB set (gemma3)"),
    ("0.12", "{2.027} - {1.906}", [LB], "its largest there (gpt-neox)"),
    ("0.010", "{1.048} - {1.038}", [LB], "the fit's largest English loss right after the swap (gpt-neox, 4 kB set)"),
    ("0.002", "{1.086} - {1.084}", [LB], "its smallest English loss on the 20 kB set (qwen2.5)"),
    ("0.005", "{1.070} - {1.065}", [LB], "its largest there (gpt-neox)"),
    ("0.021", "{1.997} - {1.976}", [LB], "its Russian loss on the 20 kB set, qwen2.5"),
    ("0.021", "{2.015} - {1.994}", [LB], "the same, llama3"),
    ("0.000", "{1.848} - {1.848}", [LB], "the same, gemma3"),
    ("0.073", "{2.414} - {2.341}", [LB], "the same, gpt-neox"),
    ("59.5", "100 * ({1.885} - {1.520}) / ({1.885} - {1.272})", [LB], "output rows fitted, 200 steps: gap closed, %"),
    ("0.024", "{1.50485} - {1.48042}", [JSONL], "split term, 200 steps, seed 2: the default minus it"),
    ("0.021", "{1.50115} - {1.47966}", [JSONL], "split term, 200 steps, seed 3: the default minus it"),
    ("0.021", "{1.47923} - {1.45809}", [JSONL], "split term, 200 steps, seed 0: the recipe without it minus it"),
    ("0.024", "{1.51085} - {1.48688}", [JSONL], "split term, 200 steps, seed 1: the recipe without it minus it"),
    ("0.023", "(({1.47923} - {1.45809}) + ({1.51085} - {1.48688}) + ({1.50485} - {1.48042}) + ({1.50115} - {1.47966}))"
     " / 4", [JSONL], "split term, 200 steps: the recipe without it minus it, mean over seeds 0-3"),
    ("0.049", "(({1.5086} - {1.45809}) + ({1.53503} - {1.48688}) + ({1.527} - {1.48042}) + ({1.52961} - {1.47966})) / 4",
     [JSONL], "200 steps: cross-entropy minus the default (with the split term), mean over seeds 0-3"),
    ("0.013", "{1.6691} - {1.65633}", [JSONL], "split term, 50 steps (10 + 40), seed 2: the recipe without it minus it"),
    ("0.015", "{1.66087} - {1.64603}", [JSONL], "split term, 50 steps (10 + 40), seed 3: the recipe without it minus it"),
    ("0.022", "{1.67881} - {1.65633}", [JSONL], "50 steps (10 + 40), seed 2: cross-entropy minus the default (split term)"),
    ("0.024", "{1.67011} - {1.64603}", [JSONL], "50 steps (10 + 40), seed 3: cross-entropy minus the default (split term)"),
    ("23.2", "{38.2} - {15.0}", [LB], "50 steps: gap closed, the default (with the split term) minus the paper's split"),
    ("38.6", "{67.2} - {28.6}", [LB], "200 steps: gap closed, the default (with the split term) minus the paper's split"),
    ("8.5", "{67.2} - {58.7}", [LB], "200 steps: gap closed, the default (with the split term) minus cross-entropy"),
    # the pooled zero-shot means themselves are printed by bench_leaderboard.py --table (its pooled table)
    ("1.11", "abs({-4.11}) - 3", [LB], "the default at 200 steps: ARC-Easy's pooled mean beyond the 3-point goal"),
    ("0.3", "{-2.9} - {-3.2}", [LB], "task-near text, cross-entropy at 1e-4, seed 3: PIQA with it minus without (the "
     "smallest per-seed move)"),
    ("2.6", "{-3.2} - {-5.8}", [LB], "task-near text, self-distillation at 1e-4, seed 3: ARC-Easy with it minus without "
     "(the largest per-seed move)"),
    ("5.1", "{-29.1} - {-34.2}", ["zero_shot_new_tokens.md"], "new words' input rows fitted, seed 2: PIQA questions whose "
     "gold choice holds more new tokens, fitted minus the 1e-4 recipe"),
    ("2.5", "{-29.1} - {-31.6}", ["zero_shot_new_tokens.md"], "the same, seed 3"),
    ("0.46", "abs({-3.46}) - 3", [LB], "the same for PIQA"),
    ("0.013", "{1.563} - {1.550}", [LB], "prediction term, 200 steps, seeds 2, 3: the 1e-4 recipe (4 seeds) minus it"),
    ("0.013", "{1.57409} - {1.56148}", [JSONL], "sparse embedding updates, 200 steps, seed 3, minus the 1e-4 recipe"),
    ("0.012", "{1.5762} - {1.56384}", [JSONL], "sparse embedding updates, 200 steps, seed 2, minus the 1e-4 recipe"),
    ("0.012", "{0.98189} - {0.96952}", [JSONL], "English, seed 3: the 1e-4 recipe minus sparse embedding updates"),
    ("0.106", "{1.885} - {1.779}", [LB], "output rows fitted, right after the swap: gain over fvt_scaled"),
    ("0.11", "{1.885} - {1.779}", [LB], "the same, to two decimals"),
    ("0.084", "({1.70501} + {1.69468}) / 2 - ({1.62152} + {1.60935}) / 2", [JSONL], "50 steps, seeds 2, 3: the 1e-4 "
     "recipe minus output rows fitted"),
    ("0.08", "({1.70501} + {1.69468}) / 2 - ({1.62152} + {1.60935}) / 2", [JSONL], "the same, to two decimals"),
    ("0.086", "({1.74471} + {1.73347}) / 2 - ({1.66015} + {1.64681}) / 2", [JSONL], "25 steps, seeds 2, 3: the 1e-4 "
     "recipe minus output rows fitted"),
    ("44.0", "100 * ({1.885} - {1.615}) / ({1.885} - {1.272})", [LB], "output rows fitted, 50 steps: gap closed, %"),
    ("30.2", "100 * ({1.885} - {1.700}) / ({1.885} - {1.272})", [JSONL, LB], "the 1e-4 recipe at 50 steps, seeds 2, 3: "
     "gap closed, %"),
    ("0.056", "{1.9472} - {1.8912}", ["self_distill.md"], "20 cross-entropy steps: fvt minus fvt_scaled, 2 seeds"),
    ("0.2", "abs({-3.2}) - 3", [LB], "self-distillation with task-near text, seed 3: ARC-Easy beyond the 3-point goal"),
    ("0.015", "{1.756} - {1.741}", [LB], "short stage 1 at 50 steps: fvt minus fvt_scaled"),
    ("0.1", "{-3.1} - {-3.2}", [LB], "text the original model writes, seed 3: PIQA, the default minus with that text"),
    ("2.3", "{-1.9} - {-4.2}", [LB], "text the original model writes, seed 3: ARC-Easy, the default minus with it"),
    ("0.021", "{1.910} - {1.889}", [LB], "right after the swap, gemma3: tokalign minus fvt (the largest such gap)"),
    ("14.4", "{14431914} / 1e6", ["alignment_seed0.md"], "alignment corpus size in MB"),
    ("0.22", "{0.7577} - {0.5418}", ["alignment_seeds.md"], "self-check P@1, gpt-neox -> gemma3: Procrustes + CSLS "
     "minus relative reps without CSLS (the smallest gap, 3 seeds' means)"),
    ("0.31", "{0.7269} - {0.4139}", ["alignment_seeds.md"], "self-check P@1, gpt-neox -> qwen2.5: Procrustes + CSLS "
     "minus relative reps with CSLS (the largest gap, 3 seeds' means)"),
    ("0.10", "{2.025} - {1.925}", [LB], "gpt-neox right after the swap: tokalign minus fvt_scaled"),
    ("0.007", "{2.032} - {2.025}", [LB], "gpt-neox right after the swap: fvt minus tokalign"),
    ("0.119", "{2.034} - {1.915}", [LB], "qwen2.5, 20 kB set, right after the swap: fvt minus fvt_scaled"),
    ("0.119", "{1.889} - {1.770}", [LB], "gemma3, 4 kB set, right after the swap: fvt minus fvt_scaled"),
    ("0.151", "{2.144} - {1.993}", [LB], "llama3, 20 kB set, right after the swap: fvt minus fvt_scaled"),
    ("0.124", "{1.934} - {1.810}", [LB], "gemma3, 20 kB set, right after the swap: fvt minus fvt_scaled"),
    ("0.111", "{2.138} - {2.027}", [LB], "gpt-neox, 20 kB set, right after the swap: fvt minus fvt_scaled"),
    ("0.121", "{2.006} - {1.885}", [LB], "qwen2.5, 4 kB set, right after the swap: fvt minus fvt_scaled"),
    ("0.150", "{2.103} - {1.953}", [LB], "llama3, 4 kB set, right after the swap: fvt minus fvt_scaled"),
    ("0.107", "{2.032} - {1.925}", [LB], "gpt-neox, 4 kB set, right after the swap: fvt minus fvt_scaled"),
    ("0.0260", "{1.7608} - {1.7348}", ["demo_run_seed1.md", "demo_run.md"], "demo after training: seed 1 minus seed 0"),
    ("31.1", "100 * ({1.9873} - {1.7348}) / ({1.9873} - {1.1765})", ["demo_run.md"], "demo, seed 0: share of the "
     "swap's damage repaired, %"),
    ("27.9", "100 * ({1.9873} - {1.7608}) / ({1.9873} - {1.1765})", ["demo_run_seed1.md"], "demo, seed 1: share of "
     "the swap's damage repaired, %"),
    ("15.4", "{44.0} - {28.6}", [LB], "gap closed at 200 steps: stage 2 at 5e-5 minus the paper's split, 2 seeds each"),
    ("0.052", "{1.793} - {1.741}", [LB], "50 steps: the paper's split minus the short stage 1 at 5e-5"),
    ("0.052", "{1.615} - {1.563}", [LB], "200 steps: stage 2 at 5e-5 minus the 1e-4 recipe"),
    ("0.05", "{1.793} - {1.741}", [LB], "the first of those, to two decimals"),
    ("0.10", "{1.710} - {1.615}", [LB], "200 steps: the paper's split minus the short stage 1 at 5e-5, two decimals"),
    ("3.5", "100 * ({0.500} - {0.465})", [LB], "ARC-Easy at 200 steps, unswapped minus swapped, 200 questions, points"),
    ("3.5", "{52.1} - {48.6}", [AGREE], "code agreement, seed 0: T = 1 minus T = 2"),
    ("3.5", "{58.3} - {54.8}", [AGREE], "prose agreement: distilled minus not distilled"),
    ("1.9", "{57.5} - {55.6}", [AGREE], "prose agreement, seed 0: T = 1 minus T = 2"),
    ("2.3", "{51.1} - {48.8}", [AGREE], "code agreement, 2 seeds: forward KL minus reverse KL"),
    ("1.5", "{51.1} - {49.6}", [AGREE], "code agreement, 2 seeds: forward KL minus JSD"),
    ("0.004", "{1.70501} - {1.7012}", [JSONL], "50 steps, seed 2: cross-entropy minus self-distillation"),
    ("0.004", "{1.361} - {1.357}", ["distill_gemma.json"], "bits per byte, seed 0: plain CE minus CE + KL"),
    ("0.004", "{1.361} - {1.357}", ["distill_gemma_seed1.json"], "bits per byte, seed 1: plain CE minus CE + KL"),
    ("0.005", "{1.69468} - {1.68974}", [JSONL], "50 steps, seed 3: cross-entropy minus self-distillation"),
    ("13.7", "{51.1} - {37.4}", [AGREE], "code agreement: forward KL (2 seeds) minus not distilled"),
    ("4.2", "100 * ({0.655} - {0.613})", [LB], "PIQA at 200 steps, unswapped minus swapped, 200 questions, points"),
    ("3.4", "100 * math.sqrt(0.62 * 0.38 / 200)", [], "one standard error of an accuracy near 0.62 on 200 questions"),
    ("3.4", "{50.1} - {46.7}", [AGREE], "code agreement, seed 1: T = 1 minus T = 2"),
    ("3.4", "{59.1} - {55.7}", [AGREE], "prose agreement, seed 1: T = 1 minus T = 2"),
    ("0.095", "{1.710} - {1.615}", [LB], "200 steps: the paper's split minus stage 2 at 5e-5, 2 seeds each"),
    ("0.037", "{1.741} - {1.704}", [LB], "50 steps: short stage 1 at 5e-5 minus the 1e-4 recipe"),
    ("1.39", "{3.552} - {2.165}", ["training_bench.json"], "after 36 steps, seed 0: random init minus TokAlign"),
    ("1.24", "{3.439} - {2.196}", ["training_bench_seed1.json"], "after 36 steps, seed 1: random init minus TokAlign"),
    ("0.03", "{2.196} - {2.165}", ["training_bench.json", "training_bench_seed1.json"], "TokAlign across seeds"),
    ("0.11", "{3.552} - {3.439}", ["training_bench.json", "training_bench_seed1.json"], "random init across seeds"),
    ("11.2", "{58.4} - {47.2}", [F32], "code acceptance at one draft token: distilled minus UAG"),
    ("3.7", "{47.5} - {43.8}", [F32], "code acceptance at two draft tokens: distilled minus UAG"),
    ("1.2", "{39.9} - {38.7}", [F32], "code acceptance at three draft tokens: distilled minus UAG"),
    ("12.3", "{59.5} - {47.2}", [BF16], "code acceptance at one draft token, bfloat16: distilled minus UAG"),
    ("2.0", "({10231} - {8211}) / 1000", ["distill_memory.md"], "GB in the process before the loss: peak minus loss"),
    ("2.9", "{18.9} / {6.6}", ["glove.md"], "times faster, a GloVe iteration at 5M tokens: C tool's mean over ours (3 runs)"),
    ("2.6", "{47.7} / {18.6}", ["glove.md"], "times faster, a GloVe iteration at 20M tokens: C tool's mean over ours (3 runs)"),
    ("5.70", "{5.32} + {0.77} / 2", ["surgery.md"], "GiB: the swapped model plus one of the two old matrices"),
    ("1.51", "({5.32} + {0.77} / 2) / {3.77}", ["surgery.md"], "that peak over the source model's size"),
    ("0.077", "{2.181} - {2.104}", ["distill_gemma.json"], "held-out KL, seed 0: plain CE minus CE + KL"),
    ("0.090", "{2.152} - {2.062}", ["distill_gemma_seed1.json"], "held-out KL, seed 1: plain CE minus CE + KL"),
    ("0.038", "{1.563} - {1.525}", [LB], "200 steps: stage 2 at 1e-4 minus 2e-4, cross-entropy (4 seeds each)"),
    ("0.030", "{1.704} - {1.674}", [LB], "50 steps: stage 2 at 1e-4 (4 seeds) minus 2e-4 (2 seeds), cross-entropy"),
    ("50.6", "100 * ({1.885} - {1.525}) / ({1.885} - {1.174})", [LB], "cross-entropy at 2e-4 (the default two releases "
     "ago) at 200 steps: gap closed against the control's end point (the original trained the same way, at 2e-4), %"),
    ("57.0", "100 * ({1.885} - ({1.48042} + {1.47966}) / 2) / ({1.885} - {1.174})", [LB, JSONL], "today's default at 200 "
     "steps, seeds 2 and 3: gap closed against the control's end point (the original trained at 2e-4, seeds 2 and 3), %"),
    ("30.1", "{58.7} - {28.6}", [LB], "200 steps: gap closed, cross-entropy at 2e-4 minus the paper's split, points"),
    ("19.4", "{34.4} - {15.0}", [LB], "50 steps: gap closed, cross-entropy at 2e-4 minus the paper's split, points"),
    ("-2.45", "({-0.9} + {-4.0}) / 2", [LB], "cross-entropy at 2e-4, 200 steps, ARC-Easy paired with "
     "the unswapped model: mean of seeds 2, 3"),
    ("-2.65", "({-2.6} + {-2.7}) / 2", [LB], "the same for PIQA"),
    ("0.022", "{1.527} - {1.50485}", [JSONL], "200 steps, seed 2: cross-entropy minus self-distillation (CE + prediction) at 2e-4"),
    ("0.028", "{1.52961} - {1.50115}", [JSONL], "200 steps, seed 3: cross-entropy minus self-distillation (CE + prediction) at 2e-4"),
    ("-1.75", "({-1.6} + {-1.9}) / 2", [LB], "self-distillation (CE + prediction) at 2e-4, ARC-Easy, mean of seeds 2, 3"),
    ("-2.85", "({-2.6} + {-3.1}) / 2", [LB], "the same for PIQA"),
    ("-2.45", "({-0.9} + {-4.0}) / 2", [LB], "cross-entropy at 2e-4, 200 steps, ARC-Easy, mean of seeds 2, 3"),
    ("-2.65", "({-2.6} + {-2.7}) / 2", [LB], "the same for PIQA"),
    ("1.75", "{2040.4} / {1165.9}", [JSONL], "training seconds, seed 3: self-distillation (CE + prediction) over cross-entropy"),
    ("0.029", "{1.5086} - {1.47923}", [JSONL], "200 steps, seed 0: cross-entropy minus self-distillation without the split term"),
    ("0.024", "{1.53503} - {1.51085}", [JSONL], "200 steps, seed 1: cross-entropy minus self-distillation without the split term"),
    ("0.026", "(({1.5086} - {1.47923}) + ({1.53503} - {1.51085}) + ({1.527} - {1.50485}) + ({1.52961} - {1.50115})) / 4",
     [JSONL], "200 steps: cross-entropy minus self-distillation, mean over seeds 0-3"),
    ("34.4", "{63.0} - {28.6}", [LB], "200 steps: gap closed, self-distillation without the split term minus the paper's split"),
    ("20.9", "{35.9} - {15.0}", [LB], "50 steps: gap closed, self-distillation without the split term minus the paper's split"),
    ("0.010", "{1.67881} - {1.6691}", [JSONL], "50 steps, seed 2: cross-entropy minus self-distillation"),
    ("0.009", "{1.67011} - {1.66087}", [JSONL], "50 steps, seed 3: cross-entropy minus self-distillation"),
    ("1.74", "{1982.2} / {1139.6}", [JSONL], "training seconds, seed 1: self-distillation over cross-entropy"),
    ("0.20", "abs({-3.20}) - 3", [LB], "self-distillation without the split term at 200 steps: ARC-Easy's pooled "
     "mean beyond the 3-point goal"),
    ("0.05", "abs({-3.05}) - 3", [LB], "the same for PIQA"),
    ("-0.04", "{-3.20} - {-3.16}", [LB], "ARC-Easy, pooled over seeds 0-3: self-distillation minus cross-entropy, points"),
    ("+0.03", "{-3.05} - {-3.08}", [LB], "PIQA, pooled over seeds 0-3: self-distillation minus cross-entropy, points"),
    ("-1.1", "{-5.1} - {-4.0}", [LB], "ARC-Easy, seed 1: self-distillation minus cross-entropy (the largest loss)"),
    ("+2.1", "{-1.9} - {-4.0}", [LB], "ARC-Easy, seed 3: self-distillation minus cross-entropy (the largest gain)"),
    ("1.2", "{-0.9} - {-2.1}", [LB], "ARC-Easy, seed 2: stage 2 at 2e-4 minus 1e-4, points (the largest such gain)"),
    ("0.4", "{-4.0} - {-4.4}", [LB], "ARC-Easy, seed 3: stage 2 at 2e-4 minus 1e-4, points (the smallest such gain)"),
    ("0.006", "({1.527} + {1.52961}) / 2 - ({1.52267} + {1.52098}) / 2", [JSONL], "200 steps, seeds 2, 3: stage 2 "
     "at 2e-4 minus 3e-4"),
    ("+0.3", "100 * (({0.512280701754386} - {0.5140350877192983}) + ({0.48947368421052634} - {0.4824561403508772})) "
     "/ 2", [JSONL], "ARC-Easy at 200 steps, mean of seeds 2, 3: stage 2 at 3e-4 minus 2e-4, points"),
    ("+0.1", "100 * (({0.628} - {0.629}) + ({0.631} - {0.628})) / 2", [JSONL], "the same for PIQA"),
    ("0.009", "{1.953} - {1.944}", [LB], "right after the swap, 4 kB set, llama3: fvt_scaled minus the same with "
     "SmolLM2's words kept (llama3+words)"),
    ("0.016", "{1.925} - {1.909}", [LB], "the same, gpt-neox"),
    ("0.013", "{1.885} - {1.872}", [LB], "the same, qwen2.5"),
    ("2.8", "{5530.0} / {1988.5}", ["rehearsed_words.md"], "times the rehearsals: whole words at 16 per window down to "
     "0.001 against the defaults, 800 windows, mean over window orders 5 and 6"),
]
MARKED = re.compile(r"\{(-?[\d.]+)\}")
NUMBER = re.compile(r"-?\d[\d,]*\.?\d*(?:e-?\d+)?")


def file_values(names: list) -> list:
    values = []
    for name in names:
        text = (RESULTS / name).read_text(encoding="utf-8")
        values += [float(m.replace(",", "")) for m in NUMBER.findall(text) if re.fullmatch(r"-?[\d,]+\.?\d*(e-?\d+)?", m)]
    return values


def holds(values: list, literal: str) -> bool:
    """A measured value written with d decimals is held when a file value rounds to it (or x100 does)."""
    d = len(literal.split(".")[1]) if "." in literal else 0
    target = float(literal)
    return any(round(v, d) == target or round(v * 100, d) == target for v in values)


def check(figure: str, expression: str, files: list) -> tuple:
    """(computed value, problems) of one derived figure."""
    problems = []
    values = file_values(files) if files else []
    for literal in MARKED.findall(expression):
        if not holds(values, literal):
            problems.append(f"{literal} is in none of {', '.join(files)}")
    value = eval(MARKED.sub(r"(\1)", expression), {"math": math, "abs": abs})  # the sums above, nothing else
    d = len(figure.split(".")[1])
    if abs(value - float(figure)) > 0.5 * 10 ** -d + 1e-9:
        problems.append(f"{expression} = {value:.{d + 2}f}, not {figure}")
    return value, problems


def main() -> int:
    lines = ["# Derived figures", "", f"Generated by `{COMMAND}`: every published number that is computed from other "
             "results (a difference, a share of the gap, a unit change), with the sum that gives it and the results "
             "files its measured values (in braces) are read from; each is checked against them on every run.", "",
             "| figure | sum | value | from | what |", "|---:|---|---:|---|---|"]
    failed = 0
    for figure, expression, files, what in DERIVED:
        value, problems = check(figure, expression, files)
        for problem in problems:
            print(f"{figure}: {problem}", file=sys.stderr)
        failed += bool(problems)
        lines.append(f"| {figure} | `{expression}` | {value:.4f} | {', '.join(files) or 'constants'} | {what} |")
    text = "\n".join(lines) + "\n"
    print(f"{len(DERIVED)} derived figures, {failed} no longer follow from their results", file=sys.stderr)
    if "--check" in sys.argv[1:]:
        stale = (RESULTS / "derived.md").read_text(encoding="utf-8") != text
        if stale:
            print("results/derived.md is stale: run python bench/bench_derived.py", file=sys.stderr)
        return 1 if failed or stale else 0
    (RESULTS / "derived.md").write_text(text, encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
