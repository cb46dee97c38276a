"""Input rows for new whole words, fitted so the swapped model reads a new word as the original model reads its pieces.

After the swap, a target token such as " toaster" that the source vocabulary splits (" to" + "aster") gets the
(scaled) mean of its pieces' rows. The source model never saw that vector: reading it, the layers do not rebuild the
word the way they do after reading the pieces, and the damage reaches every later token that attends to it.

Here each such row is optimized (every other weight frozen) so that, after a few short generic prefixes, the swapped
model's residual stream at the new token, after each of its first `num_layers` layers, matches the original model's
at the word's last piece: the states every later token's attention reads. The teacher is the model before the swap,
run once per word; the student's prefix is computed once and cached, so each step runs one position per word. Only
the input rows change: a model with tied embeddings is untied first, so each new word's output row (which decides how
likely the word is predicted) keeps its init, unless `output_weight` mixes a share of the fitted input row into it (the
source model was trained tied, so a word's input row is also a guess at its output row).

The idea follows the hidden-state distillation of new-token embeddings of AweDist (Dobler et al., 2025); here the
contexts are generic prefixes, so every new word is fitted, also words no corpus at hand contains.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import math
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from tokswap.alignment import TokenAlignment
from tokswap.errors import TokswapError
from tokswap.init_methods import padding_row_mask, shared_row_mask


class NewWordFitError(TokswapError):
    """Raised for a configuration or a model the fit cannot run with."""


@dataclass
class NewWordFitConfig:
    """Configuration of [`fit_new_word_rows`].

    Parameters:
        prefixes (`tuple[str, ...]`): texts the new word follows; each must end where the word's leading space begins.
        num_layers (`int`): how many of the first decoder layers' outputs are matched (fewer layers run faster).
        iterations (`int`): Adam steps per batch of words.
        learning_rate (`float`): Adam's step, in units of the root-mean-square entry of the input embedding matrix.
        batch_size (`int`): words fitted at once.
        min_pieces, max_pieces (`int`): a new token is fitted when its text splits into this many source tokens.
        word_pattern (`str`): a regular expression a new token's text must match in full (default: a space and
            letters; word pieces without the space have no context to be read in).
        max_words (`int`, *optional*): fit at most this many words, lowest ids first (in a BPE vocabulary, the
            earliest merges), to bound the time.
        output_weight (`float`): after the fit, each fitted word's output row becomes this share of its fitted input
            row plus the rest of its init (0, the default, leaves output rows alone).
    """

    prefixes: Tuple[str, ...] = field(
        default=("The", "I have a", "This is the"),
        metadata={"help": "Texts each new word is read after (the word brings its own leading space)."},
    )
    num_layers: int = field(default=8, metadata={"help": "Number of first decoder layers whose outputs are matched."})
    iterations: int = field(default=20, metadata={"help": "Adam steps per batch of words."})
    learning_rate: float = field(
        default=0.3, metadata={"help": "Adam step size, relative to the RMS entry of the input embedding matrix."}
    )
    batch_size: int = field(default=256, metadata={"help": "Words fitted at once."})
    min_pieces: int = field(default=2, metadata={"help": "Fit new tokens whose text splits into at least this many."})
    max_pieces: int = field(default=6, metadata={"help": "... and at most this many source tokens."})
    word_pattern: str = field(
        default=r" [^\W\d_]{2,}", metadata={"help": "Regular expression a new token's text must match in full."}
    )
    max_words: Optional[int] = field(
        default=None, metadata={"help": "Fit at most this many words, lowest ids first (BPE: earliest merges)."}
    )
    output_weight: float = field(
        default=0.0,
        metadata={
            "help": "Share of each fitted input row mixed into the word's output row: 0 keeps the output row's "
            "init, 1 copies the fitted row (what a tied model would use)."
        },
    )

    def __post_init__(self):
        self.prefixes = tuple(self.prefixes)
        if not self.prefixes or any(not p or p != p.rstrip() for p in self.prefixes):
            raise NewWordFitError("prefixes must be non-empty texts without trailing whitespace.")
        for name in ("num_layers", "iterations", "batch_size", "min_pieces", "max_pieces"):
            if getattr(self, name) < 1:
                raise NewWordFitError(f"{name} must be >= 1 (got {getattr(self, name)}).")
        if self.max_words is not None and self.max_words < 0:
            raise NewWordFitError(f"max_words must be >= 0 (got {self.max_words}).")
        if self.max_pieces < self.min_pieces:
            raise NewWordFitError("max_pieces must be >= min_pieces.")
        if not 0.0 <= self.output_weight <= 1.0:
            raise NewWordFitError(f"output_weight must be in [0, 1] (got {self.output_weight}).")
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            raise NewWordFitError(f"learning_rate must be a positive number (got {self.learning_rate}).")
        try:
            re.compile(self.word_pattern)
        except re.error as err:
            raise NewWordFitError(f"word_pattern is not a regular expression: {err}") from None


@dataclass
class NewWord:
    """One target row to fit: its id, text, and the source ids its text splits into."""

    row: int
    text: str
    pieces: List[int]


@dataclass
class NewWordFitReport:
    """What [`fit_new_word_rows`] did: rows fitted, the matching loss before and after (means over words), seconds."""

    num_words: int
    loss_before: float
    loss_after: float
    seconds: float
    untied: bool


def _prefix_ids(tokenizer) -> List[int]:
    """What a text starts with: the BOS token if the tokenizer adds one, else the EOS token (as in bits per byte)."""
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    return [] if bos is None else [int(bos)]


def new_words(
    alignment: TokenAlignment, source_tokenizer, target_tokenizer, config: Optional[NewWordFitConfig] = None
) -> List[NewWord]:
    """The target rows [`fit_new_word_rows`] fits: not in the source vocabulary, not padding, text matching
    `config.word_pattern`, splitting into `min_pieces`-`max_pieces` source tokens."""
    config = config or NewWordFitConfig()
    pattern = re.compile(config.word_pattern)
    new = ~shared_row_mask(alignment, source_tokenizer, target_tokenizer) & ~padding_row_mask(alignment)
    rows = np.flatnonzero(new[: len(target_tokenizer)])
    words = []
    texts = target_tokenizer.batch_decode([[int(r)] for r in rows])
    candidates = [(int(r), t) for r, t in zip(rows, texts) if pattern.fullmatch(t)]
    if not candidates:
        return words
    encoded = source_tokenizer([t for _, t in candidates], add_special_tokens=False)["input_ids"]
    for (row, text), pieces in zip(candidates, encoded):
        if config.min_pieces <= len(pieces) <= config.max_pieces:
            words.append(NewWord(row, text, list(pieces)))
    return words if config.max_words is None else words[: config.max_words]


def _decoder_layers(model) -> Sequence[torch.nn.Module]:
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    layers = getattr(decoder, "layers", None)
    if layers is None or len(layers) == 0:
        raise NewWordFitError(
            f"{type(model).__name__} has no list of decoder layers at get_decoder().layers; the fit needs one."
        )
    return layers


class _StopForward(Exception):
    pass


class _LayerOutputs:
    """Records the residual stream after each of the first `n` decoder layers and stops the forward there."""

    def __init__(self, model, n: int):
        self.layers = list(_decoder_layers(model))[:n]
        self.states: List[torch.Tensor] = []
        self.handles = []

    def _hook(self, index: int):
        def hook(_module, _inputs, output):
            self.states.append(output[0] if isinstance(output, tuple) else output)
            if index == len(self.layers) - 1:
                raise _StopForward

        return hook

    def run(self, module, **inputs) -> torch.Tensor:
        """`module(**inputs)` under the hooks; the recorded states at the last position, `[batch, n, hidden]`."""
        self.states = []
        self.handles = [layer.register_forward_hook(self._hook(i)) for i, layer in enumerate(self.layers)]
        try:
            module(**inputs)
        except _StopForward:
            pass
        finally:
            for handle in self.handles:
                handle.remove()
        if len(self.states) != len(self.layers):
            raise NewWordFitError("The decoder did not run its layers in order; the fit cannot read their outputs.")
        return torch.stack([s[:, -1] for s in self.states], 1)


def untie_embeddings(model) -> bool:
    """Give the output layer its own copy of a tied input matrix; True if it was tied."""
    inputs, outputs = model.get_input_embeddings(), model.get_output_embeddings()
    if outputs is None or outputs.weight is not inputs.weight:
        return False
    outputs.weight = torch.nn.Parameter(inputs.weight.detach().clone(), requires_grad=inputs.weight.requires_grad)
    configs = [model.config, model.config.get_text_config()]
    for config in configs[: 1 if configs[1] is configs[0] else 2]:
        config.tie_word_embeddings = False
    if outputs.weight.data_ptr() == inputs.weight.data_ptr():
        raise NewWordFitError("Could not untie the input and output embeddings.")
    return True


def mix_output_rows(model, rows: Sequence[int], weight: float) -> None:
    """Output rows `rows` become `weight` x their input rows + (1 - `weight`) x themselves (the model must be untied)."""
    inputs, outputs = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    if outputs is inputs:
        raise NewWordFitError("mix_output_rows needs untied embeddings (see untie_embeddings).")
    index = torch.tensor(list(rows), dtype=torch.long, device=outputs.device)
    with torch.no_grad():
        mixed = weight * inputs[index].to(outputs.dtype) + (1.0 - weight) * outputs[index]
        outputs[index] = mixed


def _usable_prefixes(words: List[NewWord], prefixes, source_tokenizer, target_tokenizer) -> List[Tuple[int, ...]]:
    """Per word, the prefixes after which its text is still the one target token and the same source pieces."""
    usable = [[] for _ in words]
    for k, prefix in enumerate(prefixes):
        texts = [prefix + w.text for w in words]
        head_t = target_tokenizer(prefix, add_special_tokens=False)["input_ids"]
        head_s = source_tokenizer(prefix, add_special_tokens=False)["input_ids"]
        as_target = target_tokenizer(texts, add_special_tokens=False)["input_ids"]
        as_source = source_tokenizer(texts, add_special_tokens=False)["input_ids"]
        for i, (w, t, s) in enumerate(zip(words, as_target, as_source)):
            if t == head_t + [w.row] and s == head_s + w.pieces:
                usable[i].append(k)
    return [tuple(u) for u in usable]


class _BatchFit:
    """One batch of words: Adam on the offsets of their rows from `base`, each word's loss its own."""

    def __init__(self, student, hooks: _LayerOutputs, cache_kw: str, base, targets, caches):
        self.student, self.hooks, self.cache_kw = student, hooks, cache_kw
        self.base, self.targets, self.caches = base, targets, caches
        self.delta = torch.zeros_like(base, requires_grad=True)

    def rows(self) -> torch.Tensor:
        return (self.base + self.delta).detach()

    def loss(self) -> torch.Tensor:
        """Per word: the relative squared error of the matched states, mean over layers and prefixes."""
        total = 0.0
        dtype = self.student.get_input_embeddings().weight.dtype
        for target, cache in zip(self.targets, self.caches):
            inputs = {
                "inputs_embeds": (self.base + self.delta).to(dtype)[:, None],
                "use_cache": True,
                self.cache_kw: copy.deepcopy(cache),
            }  # a forward appends the word to the cache it is given
            got = self.hooks.run(self.student, **inputs).float()
            total = total + ((got - target).pow(2).sum(-1) / target.pow(2).sum(-1)).mean(-1)
        return total / len(self.targets)

    def run(self, iterations: int, step: float) -> Tuple[torch.Tensor, torch.Tensor]:
        """Fit; the per-word loss before and after."""
        optimizer = torch.optim.Adam([self.delta], lr=step)
        first = None
        for _ in range(iterations):
            optimizer.zero_grad()
            per_word = self.loss()
            first = per_word.detach() if first is None else first
            per_word.sum().backward()
            optimizer.step()
        with torch.no_grad():
            last = self.loss()
        if not torch.isfinite(self.delta).all() or not torch.isfinite(last).all():
            raise NewWordFitError("The fit produced non-finite rows or losses; lower learning_rate.")
        return first, last


def _batches(words: List[NewWord], config: NewWordFitConfig, source_tokenizer, target_tokenizer):
    """The prefixes' ids on each side, and batches `(usable prefixes, words)` of words with as many pieces and the
    same prefixes after which their text is still one target token and the same source pieces."""
    student_prefixes = [
        _prefix_ids(target_tokenizer) + target_tokenizer(p, add_special_tokens=False)["input_ids"]
        for p in config.prefixes
    ]
    teacher_prefixes = [
        _prefix_ids(source_tokenizer) + source_tokenizer(p, add_special_tokens=False)["input_ids"]
        for p in config.prefixes
    ]
    groups = defaultdict(list)
    for word, usable in zip(words, _usable_prefixes(words, config.prefixes, source_tokenizer, target_tokenizer)):
        if usable:
            groups[(len(word.pieces), usable)].append(word)
    batches = [
        (usable, group[i : i + config.batch_size])
        for (_, usable), group in sorted(groups.items())
        for i in range(0, len(group), config.batch_size)
    ]
    return student_prefixes, teacher_prefixes, batches


@contextlib.contextmanager
def _frozen_in_eval(*models):
    """Every parameter frozen and every model in eval mode inside; both restored on exit."""
    modes = [m.training for m in models]
    flags = [(p, p.requires_grad) for m in models for p in m.parameters()]
    for m in models:
        m.eval()
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
        for m, mode in zip(models, modes):
            m.train(mode)


def fit_new_word_rows(
    model,
    teacher,
    alignment: TokenAlignment,
    source_tokenizer,
    target_tokenizer,
    config: Optional[NewWordFitConfig] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> NewWordFitReport:
    """Fit the input rows of the swapped `model`'s new whole words to `teacher` (the model before the swap).

    Args:
        model (`PreTrainedModel`): the swapped model, changed in place (untied first if its embeddings are tied).
        teacher (`PreTrainedModel`): the original model, which reads `source_tokenizer`'s ids.
        alignment (`TokenAlignment`): the swap's alignment (which rows are shared, which are padding).
        source_tokenizer, target_tokenizer: the tokenizers before and after the swap.
        config ([`NewWordFitConfig`], *optional*): what to fit and how.
        progress (`Callable[[str], None]`, *optional*): called with one line per batch.

    Returns:
        [`NewWordFitReport`].
    """
    config = config or NewWordFitConfig()
    num_layers = min(config.num_layers, len(_decoder_layers(model)), len(_decoder_layers(teacher)))
    words = new_words(alignment, source_tokenizer, target_tokenizer, config)
    started = time.perf_counter()
    untied = untie_embeddings(model) if words else False
    embeddings = model.get_input_embeddings().weight
    device = embeddings.device
    step = config.learning_rate * float(embeddings.detach().float().pow(2).mean().sqrt())
    student_prefixes, teacher_prefixes, batches = _batches(words, config, source_tokenizer, target_tokenizer)
    student_hooks, teacher_hooks = _LayerOutputs(model, num_layers), _LayerOutputs(teacher, num_layers)
    student, teacher_decoder = model.get_decoder(), teacher.get_decoder()
    # transformers renames `past_key_values` to `cache`
    cache_kw = "cache" if "cache" in inspect.signature(student.forward).parameters else "past_key_values"
    fitted, before_sum, after_sum = 0, 0.0, 0.0
    with _frozen_in_eval(model, teacher):
        for number, (usable, batch) in enumerate(batches, 1):
            rows = torch.tensor([w.row for w in batch], device=device)
            targets, caches = [], []
            with torch.no_grad():
                for k in usable:
                    ids = torch.tensor([teacher_prefixes[k] + w.pieces for w in batch], device=device)
                    targets.append(teacher_hooks.run(teacher_decoder, input_ids=ids).float())
                    prefix = torch.tensor([student_prefixes[k]] * len(batch), device=device)
                    caches.append(student(input_ids=prefix, use_cache=True).past_key_values)
            fit = _BatchFit(student, student_hooks, cache_kw, embeddings.detach()[rows].float(), targets, caches)
            first, last = fit.run(config.iterations, step)
            with torch.no_grad():
                embeddings[rows] = fit.rows().to(embeddings.dtype)
            fitted += len(batch)
            before_sum += float(first.sum())
            after_sum += float(last.sum())
            if progress is not None:
                progress(
                    f"new words: batch {number}/{len(batches)}, {fitted} rows, matching loss "
                    f"{float(first.mean()):.3f} -> {float(last.mean()):.3f}, {time.perf_counter() - started:.0f}s"
                )
    if config.output_weight > 0 and words:
        mix_output_rows(model, [w.row for w in words], config.output_weight)
    return NewWordFitReport(
        num_words=fitted,
        loss_before=before_sum / max(fitted, 1),
        loss_after=after_sum / max(fitted, 1),
        seconds=time.perf_counter() - started,
        untied=untied,
    )
