#!/usr/bin/env python
"""Write the tokswap notebooks in templates/notebooks/ with nbformat (run again after editing this file).

Each notebook:
- starts with a `%pip install tokswap` cell that is skipped when tokswap is importable or
  `TOKSWAP_SKIP_INSTALL=1` is set,
- keeps every setting in one code cell tagged `parameters` (papermill's convention), so a test or a
  reader can override them by running a cell after it,
- uses settings that fit a free Colab T4 (SmolLM2-135M, short sequences, a few hundred steps).

    python scripts/make_notebooks.py            # writes templates/notebooks/*.ipynb
    python scripts/make_notebooks.py --check    # exit 1 if the committed notebooks are stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "templates" / "notebooks"

INSTALL = """\
# Install tokswap (skipped when it is already importable, or when TOKSWAP_SKIP_INSTALL=1 is set).
import importlib.util
import os

if os.environ.get("TOKSWAP_SKIP_INSTALL") or importlib.util.find_spec("tokswap") is not None:
    print("tokswap is already installed")
else:
    %pip install -q tokswap"""

CITATION = """\
TokAlign: Chong Li, Jiajun Zhang, Chengqing Zong. *TokAlign: Efficient Vocabulary Adaptation via
Token Alignment*. ACL 2025. [arXiv:2506.03523](https://arxiv.org/abs/2506.03523)"""


def code(source: str, tags=()):
    cell = new_code_cell(source.strip("\n"))
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def md(source: str):
    return new_markdown_cell(source.strip("\n"))


def notebook(cells):
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata["accelerator"] = "GPU"
    nb.metadata["colab"] = {"provenance": [], "gpuType": "T4"}
    return nb


# ---------------------------------------------------------------------------------------- 1
def swap_with_prebuilt():
    return notebook([
        md("""
# Give a model a new tokenizer with a prebuilt alignment

[tokswap](https://pypi.org/project/tokswap/) gives any Hugging Face causal LM a new tokenizer with
TokAlign: each token of the new vocabulary starts from the embedding of the old token it is aligned
with. Computing an alignment takes a corpus and GloVe training, but for popular tokenizer pairs it is
already on the Hub: `TokenizerSwapper.from_pretrained` looks the pair up (by the hashes of both
vocabularies), checks it against the tokenizers you load, downloads it and only computes one when
nothing fits.

Runs on a free Colab T4 (or a CPU) in a few minutes.
"""),
        code(INSTALL, tags=["install"]),
        md("## Settings"),
        code("""
SOURCE_MODEL = "HuggingFaceTB/SmolLM2-135M"  # the model to adapt (Hub id or local folder)
TARGET_TOKENIZER = "Qwen/Qwen2.5-0.5B"      # the tokenizer it should speak (a tokenizer or model id)
INIT_METHOD = "fvt_scaled"                  # how new rows start: the measured best; "tokalign" is the paper
PROMPT = "The capital of France is"
MAX_NEW_TOKENS = 30
OUTPUT_DIR = "swapped-model"
""", tags=["parameters"]),
        md("## Swap\n\nThe log says whether a prebuilt alignment was used (and which repo and revision) or one was computed."),
        code("""
import torch

from tokswap.swapper import TokenizerSwapper

device = "cuda" if torch.cuda.is_available() else "cpu"
swapper = TokenizerSwapper.from_pretrained(SOURCE_MODEL, TARGET_TOKENIZER, init_method=INIT_METHOD)
print(swapper)
origin = swapper.swap_record["alignment"]
print("alignment:", origin["origin"], origin.get("repo_id", ""), origin.get("revision", ""))
"""),
        md("## What the alignment says\n\nEvery target token got a source row: identical tokens map to themselves, the others to their nearest source token."),
        code("""
alignment = swapper.alignment
print(alignment)
metrics = {k: v for k, v in alignment.config.get("metrics", {}).items() if isinstance(v, (int, float))}
print("metrics:", metrics)

from tokswap.alignment import RowSource

matched = [i for i, how in enumerate(alignment.row_sources) if how == RowSource.GLOVE][:10]
for target_id in matched:
    source_id = int(alignment.target_to_source[target_id])
    print(f"{swapper.tokenizer.convert_ids_to_tokens(target_id)!r:>20} <- {swapper.source_tokenizer.convert_ids_to_tokens(source_id)!r}")
"""),
        md("## Generate\n\nRight after the swap the model is rough: the new embeddings are only an initialization. Notebook 3 trains it back to health."),
        code("""
model = swapper.model.to(device).eval()
tokenizer = swapper.tokenizer
inputs = tokenizer(PROMPT, return_tensors="pt").to(device)
with torch.no_grad():
    output = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False,
                            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)
print(tokenizer.decode(output[0], skip_special_tokens=True))
"""),
        md("## Save\n\nThe folder is a plain `transformers` model (plus `alignment/` and `tokswap_config.json`): no tokswap needed to load it."),
        code("""
swapper.save_pretrained(OUTPUT_DIR, overwrite=True)  # re-running replaces its own earlier output

from transformers import AutoModelForCausalLM, AutoTokenizer

reloaded = AutoModelForCausalLM.from_pretrained(OUTPUT_DIR)
reloaded_tokenizer = AutoTokenizer.from_pretrained(OUTPUT_DIR)
assert len(reloaded_tokenizer) == len(tokenizer)
print("saved to", OUTPUT_DIR, "with", reloaded.get_input_embeddings().weight.shape[0], "embedding rows")
"""),
        md(CITATION),
    ])


# ---------------------------------------------------------------------------------------- 2
def build_alignment():
    return notebook([
        md("""
# Build your own alignment

When no prebuilt alignment fits your tokenizer pair, compute one: both tokenizers tokenize the same
corpus, GloVe vectors are learned for each vocabulary, and every target token is matched to its most
similar source token. Quality is reported as BLEU-1 (does the source tokenization, mapped through
the alignment, reproduce the target tokenization?) and, optionally, semantic similarity.

With the settings below it takes a few minutes on Colab; more text and larger vectors give better
alignments (the paper uses 300 dimensions and much more text).
"""),
        code(INSTALL, tags=["install"]),
        md("## Settings"),
        code("""
SOURCE_TOKENIZER = "HuggingFaceTB/SmolLM2-135M"  # tokenizer (or model) ids, local folders or tokswap asset names
TARGET_TOKENIZER = "Qwen/Qwen2.5-0.5B"
CORPUS = None               # None: tokswap's built-in mixed corpus; or a .jsonl/.txt path, a list of strings
CORPUS_BYTES = 4_000_000    # size of the built-in corpus
GLOVE_DIM = 100             # the paper uses 300
GLOVE_ITERATIONS = 10       # the paper uses 15
SEMANTIC_SIMILARITY = True  # needs the all-MiniLM-L6-v2 sentence encoder
OUTPUT_DIR = "my-alignment"
PUSH_TO = None              # e.g. "your-name/smollm2-135m_to_qwen2.5-0.5b" to publish it
""", tags=["parameters"]),
        md("## Compute"),
        code("""
from tokswap.align.pipeline import AlignmentConfig, align_tokenizers, summary_table
from tokswap.swapper import load_tokenizer

source = load_tokenizer(SOURCE_TOKENIZER)
target = load_tokenizer(TARGET_TOKENIZER)
config = AlignmentConfig(
    dim=GLOVE_DIM, iterations=GLOVE_ITERATIONS, corpus_bytes=CORPUS_BYTES, semantic_similarity=SEMANTIC_SIMILARITY
)
alignment = align_tokenizers(source, target, corpus=CORPUS, config=config)
print(summary_table(alignment))
"""),
        md("## Look at some matches"),
        code("""
import numpy as np

from tokswap.alignment import RowSource

glove_rows = np.flatnonzero(alignment.row_sources == RowSource.GLOVE)
best = glove_rows[np.argsort(-alignment.scores[glove_rows])][:15]
for target_id in best:
    source_id = int(alignment.target_to_source[target_id])
    print(f"{alignment.scores[target_id]:.3f}  {target.convert_ids_to_tokens(int(target_id))!r:>20} <- {source.convert_ids_to_tokens(source_id)!r}")
"""),
        md("## Save, reload, publish\n\n`push_to_hub` writes `alignment.safetensors`, `alignment_config.json` and a card in one commit, and adds the pair to the alignment index so `TokenizerSwapper.from_pretrained` finds it."),
        code("""
from tokswap import TokenAlignment

alignment.save_pretrained(OUTPUT_DIR, overwrite=True)  # re-running replaces its own earlier output
reloaded = TokenAlignment.from_pretrained(OUTPUT_DIR)
reloaded.verify(source, target)  # raises if the tokenizers are not the ones it was built for
print(reloaded)

if PUSH_TO:
    info = alignment.push_to_hub(PUSH_TO)
    print("pushed:", info.commit_url)
"""),
        md("Use it with `TokenizerSwapper.from_pretrained(model, TARGET_TOKENIZER, alignment=OUTPUT_DIR)` (or the Hub id).\n\n" + CITATION),
    ])


# ---------------------------------------------------------------------------------------- 3
def train_and_distill():
    return notebook([
        md("""
# Train a swapped model back to health, then distill

After a swap only the embeddings are new. TokAlign's recipe trains in two stages: first the
embeddings and `lm_head` alone (lr 6.4e-4), then everything (lr 2e-4). By default both stages are
self-distilled from the model before the swap: on the same text, read in its own tokens, it teaches the
swapped model its next-token predictions wherever both tokenizations end a token at the same byte (down to
how they divide among the new vocabulary's longer tokens), beside the ordinary cross-entropy (`recovery="ce"` turns that off and trains faster). Once the model speaks the
teacher's tokenizer it can also be distilled from it token by token (cross-entropy + KL to the
teacher). Bits per byte compare the model before and after fairly across tokenizers.

The settings fit a free Colab T4 (SmolLM2-135M student, Qwen2.5-0.5B teacher, 512-token sequences).
"""),
        code(INSTALL, tags=["install"]),
        md("## Settings"),
        code("""
SOURCE_MODEL = "HuggingFaceTB/SmolLM2-135M"
TARGET_TOKENIZER = "Qwen/Qwen2.5-0.5B"
SWAPPED_MODEL = None              # a folder saved by notebook 1; None swaps SOURCE_MODEL here
TEACHER = "Qwen/Qwen2.5-0.5B"     # must use TARGET_TOKENIZER; None skips distillation
DATASET = "Salesforce/wikitext"   # a Hub dataset, or a local .jsonl / .txt file
DATASET_CONFIG = "wikitext-2-raw-v1"
DATASET_SPLIT = "train"
TEXT_COLUMN = "text"
MAX_DOCUMENTS = 20_000
MAX_LENGTH = 512
BATCH_SIZE = 8
STAGE1_STEPS = 80                 # embeddings + lm_head only: a fifth of the steps measured best
STAGE2_STEPS = 320                # all parameters
DISTILL_STEPS = 200
EVAL_DOCUMENTS = 200
OUTPUT_DIR = "swapped-trained"
""", tags=["parameters"]),
        md("## Data"),
        code("""
from datasets import load_dataset

if DATASET.endswith((".jsonl", ".json")):
    dataset = load_dataset("json", data_files=DATASET, split="train")
elif DATASET.endswith(".txt"):
    dataset = load_dataset("text", data_files=DATASET, split="train")
else:
    dataset = load_dataset(DATASET, DATASET_CONFIG, split=DATASET_SPLIT)
if TEXT_COLUMN != "text":
    dataset = dataset.rename_column(TEXT_COLUMN, "text")
dataset = dataset.filter(lambda row: len(row["text"].strip()) > 20)
dataset = dataset.select(range(min(MAX_DOCUMENTS, len(dataset)))).select_columns(["text"])
split = dataset.train_test_split(test_size=min(EVAL_DOCUMENTS, len(dataset) // 5), seed=0)
train_data, eval_texts = split["train"], split["test"]["text"]
print(len(train_data), "training documents,", len(eval_texts), "held out")
"""),
        md("## Swap (or load the swapped model)"),
        code("""
import torch

from tokswap.evaluation import bits_per_byte
from tokswap.swapper import TokenizerSwapper

device = "cuda" if torch.cuda.is_available() else "cpu"
if SWAPPED_MODEL:
    swapper = TokenizerSwapper.from_pretrained(SWAPPED_MODEL)
else:
    swapper = TokenizerSwapper.from_pretrained(SOURCE_MODEL, TARGET_TOKENIZER)
swapper.model.to(device)


def measure(label):
    result = bits_per_byte(swapper.model, swapper.tokenizer, eval_texts, max_length=MAX_LENGTH, progress=False)
    row = {"bits_per_byte": round(result.bits_per_byte, 4), "bytes_per_token": round(result.num_bytes / result.num_tokens, 3)}
    swapper.swap_record.setdefault("evaluation", {})[label] = row  # the model card shows this table
    print(f"{label:>20}: {row}")


measure("after swap")
"""),
        md(
            "## Two-stage training\n\n`swapper.train` reloads the original model (`SOURCE_MODEL`, or the source "
            "recorded in `SWAPPED_MODEL`) as the\nself-distillation teacher."
        ),
        code("""
from tokswap.training import VocabAdaptationConfig

train_config = VocabAdaptationConfig(
    output_dir=f"{OUTPUT_DIR}-runs/adapt",  # checkpoints beside the saved model, not inside it
    stage1_max_steps=STAGE1_STEPS,
    stage2_max_steps=STAGE2_STEPS,
    max_length=MAX_LENGTH,
    per_device_train_batch_size=BATCH_SIZE,
    logging_steps=max(1, (STAGE1_STEPS + STAGE2_STEPS) // 20),
    save_steps=10_000,
    save_final_model=False,
)
swapper.train(train_data, train_config)
measure("after training")
"""),
        md("## Token-level distillation from the teacher"),
        code("""
if TEACHER:
    from tokswap.distillation import TokenDistillationConfig

    distill_config = TokenDistillationConfig(
        output_dir=f"{OUTPUT_DIR}-runs/distill",  # checkpoints beside the saved model, not inside it
        max_steps=DISTILL_STEPS,
        max_length=MAX_LENGTH,
        per_device_train_batch_size=BATCH_SIZE,
        learning_rate=5e-5,
        alpha=0.5,
        temperature=1.0,
        logging_steps=max(1, DISTILL_STEPS // 10),
        save_strategy="no",
        report_to="none",
    )
    swapper.distill(train_data, TEACHER, distill_config)
    measure("after distillation")
"""),
        md("## Save\n\n`swap_record` (saved as `tokswap_config.json`) now holds the recipe and the measurements; `push_to_hub` (notebook 4) turns them into the model card."),
        code("""
swapper.save_pretrained(OUTPUT_DIR, overwrite=True)  # re-running replaces its own earlier output
print(swapper.swap_record["evaluation"])
"""),
        md(CITATION),
    ])


# ---------------------------------------------------------------------------------------- 4
def push():
    return notebook([
        md("""
# Publish a swapped model on the Hub

`swapper.push_to_hub(repo_id)` uploads, in one commit, the model, its tokenizer and generation config,
the alignment (`alignment/`), `tokswap_config.json` and a model card: base model, what was swapped
for what, the init method, the alignment's BLEU-1 and coverage, the training recipe, bits per byte
before and after, how to load it and the TokAlign citation. The license, languages and datasets of
the source model's card carry over. Your token is only used for the requests; it is never written
to any file.
"""),
        code(INSTALL, tags=["install"]),
        md("## Settings"),
        code("""
SOURCE_MODEL = "HuggingFaceTB/SmolLM2-135M"
TARGET_TOKENIZER = "Qwen/Qwen2.5-0.5B"
SWAPPED_MODEL = None                                 # a folder from notebooks 1 or 3; None swaps here
REPO_ID = "your-name/SmolLM2-135M-qwen2.5-tokenizer"
PRIVATE = True
PROMPT = "The capital of France is"
""", tags=["parameters"]),
        md("## Log in\n\nSkipped when a token is already configured (`HF_TOKEN`, or `hf auth login`)."),
        code("""
from huggingface_hub import get_token

if get_token() is None:
    from huggingface_hub import notebook_login

    notebook_login()
"""),
        md("## Swap (or load) and push"),
        code("""
from tokswap.swapper import TokenizerSwapper

if SWAPPED_MODEL:
    swapper = TokenizerSwapper.from_pretrained(SWAPPED_MODEL)
else:
    swapper = TokenizerSwapper.from_pretrained(SOURCE_MODEL, TARGET_TOKENIZER)
commit = swapper.push_to_hub(REPO_ID, private=PRIVATE, commit_message="Upload model swapped with tokswap")
print(commit.commit_url)
"""),
        md("## Anyone can now load it with plain transformers"),
        code("""
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained(REPO_ID)
model = AutoModelForCausalLM.from_pretrained(REPO_ID)
inputs = tokenizer(PROMPT, return_tensors="pt")
with torch.no_grad():
    output = model.generate(**inputs, max_new_tokens=20, do_sample=False,
                            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)
print(tokenizer.decode(output[0], skip_special_tokens=True))
"""),
        md("## The model card"),
        code("""
from huggingface_hub import ModelCard

card = ModelCard.load(REPO_ID)
print(card.data.to_yaml())
print(card.text[:1500])
"""),
        md(CITATION),
    ])


# ---------------------------------------------------------------------------------------- 5
def make_draft():
    return notebook([
        md("""
# Make a draft model for speculative decoding

Speculative decoding lets a small *draft* model propose a few tokens that the big model then checks in one
forward pass; with greedy decoding the output is exactly the big model's. transformers wants the draft to
share the big model's vocabulary; otherwise it re-tokenizes the draft's text at every step (Universal
Assisted Generation), which costs time and acceptance.

tokswap makes such a draft from any small model: it gives the small model the big model's exact vocabulary
(`vocab_size`, special token ids, generation config), then distills it from the big model token by token.
The result is a plain transformers folder you pass as `assistant_model`.
"""),
        code(INSTALL, tags=["install"]),
        md("## Settings"),
        code("""
SMALL_MODEL = "HuggingFaceTB/SmolLM2-135M"
BIG_MODEL = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
DATASET = "bigcode/the-stack-smol"     # a Hub dataset, or a local .jsonl / .txt file
DATASET_CONFIG = None
DATASET_DIR = "data/python"
DATASET_SPLIT = "train"
TEXT_COLUMN = "content"
MAX_DOCUMENTS = 5_000
MAX_LENGTH = 256
BATCH_SIZE = 8
DISTILL_STEPS = 300
DIVERGENCE = "forward_kl"               # agreed most with the big model on code; or "reverse_kl", "jsd"
PROMPTS = ["def fibonacci(n):", "import numpy as np\\n\\ndef normalize(x):", "The three laws of motion are"]
MAX_NEW_TOKENS = 64
NUM_ASSISTANT_TOKENS = 5
FREQUENT_TOKENS = 32768                 # the draft's head scores only these many most frequent tokens (0: all)
OUTPUT_DIR = "draft-model"
""", tags=["parameters"]),
        md("## Data"),
        code("""
from datasets import load_dataset

if DATASET.endswith((".jsonl", ".json")):
    dataset = load_dataset("json", data_files=DATASET, split="train")
elif DATASET.endswith(".txt"):
    dataset = load_dataset("text", data_files=DATASET, split="train")
else:
    dataset = load_dataset(DATASET, DATASET_CONFIG, data_dir=DATASET_DIR, split=DATASET_SPLIT)
if TEXT_COLUMN != "text":
    dataset = dataset.rename_column(TEXT_COLUMN, "text")
dataset = dataset.filter(lambda row: len(row["text"].strip()) > 20)
train_data = dataset.select(range(min(MAX_DOCUMENTS, len(dataset)))).select_columns(["text"])
print(len(train_data), "training documents")
"""),
        md("## The big model, and the draft before distillation"),
        code("""
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tokswap import TokenizerSwapper, measure_speculative_decoding

device = "cuda" if torch.cuda.is_available() else "cpu"
big = AutoModelForCausalLM.from_pretrained(BIG_MODEL).to(device).eval()
big_tokenizer = AutoTokenizer.from_pretrained(BIG_MODEL)
swapper = TokenizerSwapper.for_drafting(SMALL_MODEL, BIG_MODEL)
swapper.model.to(device)
assert swapper.model.config.vocab_size == big.config.vocab_size
alone = measure_speculative_decoding(big, big_tokenizer, PROMPTS, max_new_tokens=MAX_NEW_TOKENS)


def measure(label, reference=None, assistant=None):
    reference = reference or alone  # the big model alone, run the same way
    assistant = (assistant or swapper.model).eval()
    result = measure_speculative_decoding(big, big_tokenizer, PROMPTS, assistant=assistant,
                                          max_new_tokens=MAX_NEW_TOKENS, num_assistant_tokens=NUM_ASSISTANT_TOKENS,
                                          baseline=reference["outputs"])
    row = {"acceptance_rate": round(result["acceptance_rate"], 3),
           "tokens_per_forward": round(result["tokens_per_forward"], 2),
           "speedup": round(result["tokens_per_second"] / reference["tokens_per_second"], 2),
           "num_assistant_tokens": NUM_ASSISTANT_TOKENS, "lossless": result["lossless"]}
    swapper.swap_record.setdefault("speculative_decoding", {})[label] = row  # the model card shows this table
    print(f"{label:>20}: {row}")


measure("before distillation")
"""),
        md("## Distill the draft from the big model"),
        code("""
from tokswap.distillation import TokenDistillationConfig

config = TokenDistillationConfig(
    output_dir=f"{OUTPUT_DIR}-runs/distill",  # checkpoints beside the saved model, not inside it
    max_steps=DISTILL_STEPS,
    max_length=MAX_LENGTH,
    per_device_train_batch_size=BATCH_SIZE,
    learning_rate=2e-4,
    alpha=0.0,                  # pure distillation: the draft should predict what the big model predicts
    divergence=DIVERGENCE,
    logging_steps=max(1, DISTILL_STEPS // 10),
    save_strategy="no",
    report_to="none",
)
swapper.distill(train_data, big, config, teacher_tokenizer=big_tokenizer)
measure("after distillation")
"""),
        md("""## A cheaper head: only the most frequent tokens

The draft now carries the big model's whole output layer (151,936 rows for Qwen), which can cost as much as the
rest of a small draft. `frequency_ranked_head` lets the draft score only the tokens that are frequent in your
text while it proposes (FR-Spec); a rarer token is never proposed, the big model still decides every token, so
outputs stay exactly the big model's."""),
        code("""
from tokswap.drafting import frequency_ranked_head, rank_tokens_by_frequency

if FREQUENT_TOKENS:
    keep_ids, coverage = rank_tokens_by_frequency(big_tokenizer, train_data["text"], FREQUENT_TOKENS)
    print(f"the {FREQUENT_TOKENS} most frequent tokens cover {coverage:.1%} of the training text")
    with frequency_ranked_head(swapper.model, keep_ids):
        measure(f"head: {FREQUENT_TOKENS} tokens")
"""),
        md("""## On a CPU: make verification cheap

To check k draft tokens the big model runs one forward over k + 1 tokens. On a CPU, PyTorch's linear layers over
2 to 8 rows can cost 2-3x their one-row call, which eats the speed-up. `small_batch_matmul` computes them as one
product with the rows as columns, at about the one-row cost, while the context is open (same results up to float
rounding; the big model alone is timed inside it too, so the comparison is fair). Where the CPU has bfloat16
instructions (avx512_bf16, AMX), a bfloat16 copy of the draft reads half the bytes per proposal; the big model keeps
its precision and still decides every token."""),
        code("""
from tokswap.drafting import small_batch_matmul

if device == "cpu":
    with small_batch_matmul(big, swapper.model):
        alone_fast = measure_speculative_decoding(big, big_tokenizer, PROMPTS, max_new_tokens=MAX_NEW_TOKENS)
        print(f"big model alone: {alone_fast['tokens_per_second']:.1f} tok/s (plain: {alone['tokens_per_second']:.1f})")
        measure("small-batch matmul", reference=alone_fast)
    if torch.backends.mkldnn.is_available():
        import copy

        draft_bf16 = copy.deepcopy(swapper.model).to(torch.bfloat16)
        with small_batch_matmul(big, draft_bf16):
            measure("bfloat16 draft", reference=alone_fast, assistant=draft_bf16)
        del draft_bf16
"""),
        md("## Use it, save it\n\nThe saved folder loads with plain transformers; `swapper.push_to_hub(repo_id)` writes a card that names the model it drafts for and the table above."),
        code("""
inputs = big_tokenizer(PROMPTS[0], return_tensors="pt").to(device)
output = big.generate(**inputs, assistant_model=swapper.model, do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
print(big_tokenizer.decode(output[0], skip_special_tokens=True))
swapper.save_pretrained(OUTPUT_DIR, overwrite=True)
if FREQUENT_TOKENS:  # load them back with tokswap.drafting.load_frequency_ranked_tokens(OUTPUT_DIR)
    from tokswap.drafting import save_frequency_ranked_tokens

    save_frequency_ranked_tokens(OUTPUT_DIR, keep_ids, coverage)
print("saved to", OUTPUT_DIR)
"""),
        md(CITATION),
    ])


NOTEBOOKS = {
    "01_swap_with_prebuilt_alignment.ipynb": swap_with_prebuilt,
    "02_build_your_own_alignment.ipynb": build_alignment,
    "03_train_and_distill.ipynb": train_and_distill,
    "04_push_to_hub.ipynb": push,
    "05_make_a_draft_model.ipynb": make_draft,
}


def render(name: str) -> str:
    nb = NOTEBOOKS[name]()
    # Stable cell ids, so regenerating gives the same file.
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{Path(name).stem[:2]}-{i:02d}"
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if templates/notebooks is out of date")
    parser.add_argument("--output", default=str(OUTPUT))
    args = parser.parse_args(argv)
    output = Path(args.output)
    stale = []
    for name in NOTEBOOKS:
        text = render(name)
        path = output / name
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
            continue
        output.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".ipynb.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        print("wrote", path)
    if stale:
        print("stale (run scripts/make_notebooks.py):", ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
