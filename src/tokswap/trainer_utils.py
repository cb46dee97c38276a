"""What tokswap's trainers share: stopping on non-finite weights and losses, hardware choices (attention kernel,
bf16, CPU processes), guards around a training stage, resuming from checkpoints, training sets from files, and
loading a model for training."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import re
from pathlib import Path
from typing import Optional, Union

import torch

from tokswap.errors import NonFiniteError, TokswapError, TrainingError
from tokswap.modeling import nonfinite_parameters, vocabulary_shape
from tokswap.utils import check_local_path, check_run_dir, claim_run_dir, get_logger

logger = get_logger(__name__)


def check_finite(model, what: str = "model", allow_nonfinite: bool = False) -> dict[str, int]:
    """Refuse a model with NaN or infinite weights before anything is built on it.

    Args:
        model (`torch.nn.Module`): the model to check (every floating-point parameter).
        what (`str`, defaults to `"model"`): how the message names it, e.g. `"the source model"`, `"the teacher"`.
        allow_nonfinite (`bool`, defaults to `False`): log a warning instead of raising.

    Returns:
        `dict[str, int]`: the offending parameters and their non-finite counts (empty when all is finite).

    Raises:
        `NonFiniteError`: some weight is NaN or infinite and `allow_nonfinite` is not set.
    """
    found = nonfinite_parameters(model)
    if not found:
        return found
    listed = ", ".join(f"{name} ({count})" for name, count in list(found.items())[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    message = (
        f"{what[:1].upper()}{what[1:]} has {sum(found.values())} NaN/infinite weight values in {len(found)} "
        f"parameter(s): {listed}{more}. Training on it gives NaN losses; use an intact checkpoint (or pass "
        "allow_nonfinite=True / --allow-nonfinite to go on anyway)."
    )
    if not allow_nonfinite:
        raise NonFiniteError(message)
    logger.warning("%s", message)
    return found


def _is_finite_number(value) -> bool:
    return not isinstance(value, (int, float)) or math.isfinite(value)


def _non_finite_loss_callback_class():
    from transformers import TrainerCallback

    class NonFiniteLossCallback(TrainerCallback):
        """Stop a run as soon as a logged `loss` or `grad_norm` is NaN or infinite, with a `NonFiniteError`.

        `Trainer` averages such losses away (`logging_nan_inf_filter`) and keeps stepping, which silently turns
        the weights into NaN. The error is raised from `on_log`, before the checkpoint of that step is saved.
        Under fp16 mixed precision an infinite gradient norm is normal (the loss scaler skips that step), so
        only the loss is checked there.
        """

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = logs or {}
            keys = ["loss"] + ([] if getattr(args, "fp16", False) else ["grad_norm"])
            bad = {key: logs[key] for key in keys if key in logs and not _is_finite_number(logs[key])}
            if bad:
                control.should_training_stop = True
                shown = ", ".join(f"{key}={value}" for key, value in bad.items())
                raise NonFiniteError(
                    f"Training diverged at step {state.global_step}: {shown}. Lower the learning rate, check the "
                    "data and the starting weights (tokswap.training.check_finite), or resume from an earlier "
                    "checkpoint."
                )
            return control

    NonFiniteLossCallback.__module__ = __name__
    return NonFiniteLossCallback


def __getattr__(name):
    # `NonFiniteLossCallback` subclasses transformers' TrainerCallback; building it on first use keeps
    # `import tokswap.training` (and `tokswap train --help`) from importing transformers' Trainer.
    if name == "NonFiniteLossCallback":
        cls = globals()["NonFiniteLossCallback"] = _non_finite_loss_callback_class()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def with_non_finite_check(callbacks) -> list:
    """`callbacks` plus a `NonFiniteLossCallback`, unless one is there already."""
    callbacks = list(callbacks or [])
    cls = globals().get("NonFiniteLossCallback") or __getattr__("NonFiniteLossCallback")
    if not any(isinstance(cb, cls) or cb is cls for cb in callbacks):
        callbacks.append(cls())
    return callbacks


def pick_attn_implementation() -> str:
    """Choose the attention kernel: `"flash_attention_2"` when `flash_attn` is installed and a CUDA GPU
    is visible, else `"sdpa"` (PyTorch's fused attention, which works everywhere).

    Returns:
        `str`: a value for `from_pretrained(..., attn_implementation=...)`.
    """
    if torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


def bf16_supported() -> bool:
    """Whether bf16 mixed precision can be used: only on a CUDA device that supports it.

    TRL's own default (`bf16=True`) raises on a CPU, so tokswap decides instead of inheriting it.
    """
    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def launched_on_cpus() -> bool:
    """Whether this is one of several processes (torchrun, accelerate launch) on a machine with no GPU.

    transformers joins such processes into a (gloo) process group only with `use_cpu=True`; without it each
    process trains alone on all the data and they all write the same folder. tokswap's configs set it.
    """
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()


def is_main_process() -> bool:
    """Rank 0 of a multi-process run (or a single process): the one that writes final outputs."""
    return int(os.environ.get("RANK", "0")) == 0


def _world_size() -> int:
    if "WORLD_SIZE" in os.environ:  # set by torchrun and accelerate launch; reading it initialises nothing
        return max(1, int(os.environ["WORLD_SIZE"]))
    try:
        from accelerate import PartialState

        return max(1, int(PartialState().num_processes))
    except Exception:  # accelerate not initialised in an odd environment: fall back to the launcher's env
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))


@contextlib.contextmanager
def never_shrink_vocabulary(model):
    """Within this block, `model.resize_token_embeddings(n)` never shrinks the (padded) vocabulary.

    A swapped model's embedding matrix is usually padded past `len(tokenizer)` (to a multiple of 64 or to the
    original size). Libraries that "fix" a mismatch call `resize_token_embeddings(len(tokenizer))`, which would
    drop rows and change `config.vocab_size`; growth is still allowed. On exit the shape is checked.
    """
    before = vocabulary_shape(model)
    original = model.__dict__.get("resize_token_embeddings")
    bound = model.resize_token_embeddings

    def guarded_resize(new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True, **kwargs):
        current = model.get_input_embeddings().weight.shape[0]
        if new_num_tokens is not None and new_num_tokens < current:
            logger.info("Ignored a request to shrink the vocabulary from %d to %d rows.", current, new_num_tokens)
            new_num_tokens = current
            pad_to_multiple_of = None
        return bound(new_num_tokens, pad_to_multiple_of=pad_to_multiple_of, mean_resizing=mean_resizing, **kwargs)

    model.resize_token_embeddings = guarded_resize
    try:
        yield
    finally:
        if original is None:
            model.__dict__.pop("resize_token_embeddings", None)
        else:
            model.resize_token_embeddings = original
    after = vocabulary_shape(model)
    if any(b is not None and a is not None and a < b for a, b in zip(after, before)):
        raise TrainingError(
            f"The vocabulary shrank during training: {before} -> {after} (vocab_size, in rows, out rows)."
        )


@contextlib.contextmanager
def _restore_forward(model):
    """Undo the instance-level `forward` that `SFTTrainer` installs (its fused LM head) when the stage ends, so
    the returned model behaves like a freshly loaded one and the next stage does not stack a second patch.
    A `forward` that was there before (e.g. accelerate's device-map hooks) is put back."""
    had_forward = "forward" in model.__dict__
    previous = model.__dict__.get("forward")
    try:
        yield
    finally:
        if had_forward:
            model.__dict__["forward"] = previous
        else:
            model.__dict__.pop("forward", None)


def _check_dataset(dataset, text_field: str) -> None:
    columns = getattr(dataset, "column_names", None)
    if columns is None:  # IterableDataset without resolved features
        return
    if "input_ids" not in columns and text_field not in columns and not ({"prompt", "completion"} <= set(columns)):
        raise TrainingError(
            f"The training dataset has columns {columns}; it needs a {text_field!r} column (raw text) or an "
            "'input_ids' column (pre-tokenized)."
        )


_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


_TRAINER_STATE_NAME = "trainer_state.json"


_WEIGHTS_FILES = ("model.safetensors", "pytorch_model.bin", "adapter_model.safetensors", "adapter_model.bin")


_WEIGHTS_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def _has_weights(path: Path) -> bool:
    """Whether `path` holds model (or adapter) weights; a sharded index counts only with all its shards."""
    if any((path / name).is_file() and (path / name).stat().st_size > 0 for name in _WEIGHTS_FILES):
        return True
    for name in _WEIGHTS_INDEXES:
        try:
            shards = set(json.loads((path / name).read_text(encoding="utf-8"))["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if shards and all((path / shard).is_file() for shard in shards):
            return True
    return False


def checkpoint_problem(path) -> Optional[str]:
    """Why the checkpoint folder `path` is incomplete (e.g. the run was killed while writing it), or None.

    The Trainer writes `trainer_state.json` after the weights, optimizer and RNG state, so a checkpoint is
    complete when it holds a readable `trainer_state.json` and model (or adapter) weights.
    """
    path = Path(path)
    try:
        json.loads((path / _TRAINER_STATE_NAME).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"no {_TRAINER_STATE_NAME}"
    except (OSError, ValueError):
        return f"an unreadable {_TRAINER_STATE_NAME}"
    if not _has_weights(path):
        return "no model weights"
    return None


def latest_checkpoint(directory) -> Optional[str]:
    """The complete `checkpoint-N` folder with the largest N under `directory`, or None.

    Incomplete checkpoints (`checkpoint_problem`: the run was killed while writing them) are skipped with a
    warning in favour of the newest complete one.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in directory.iterdir() if p.is_dir() and (m := _CHECKPOINT_RE.match(p.name))]
    for _, path in sorted(found, reverse=True):
        problem = checkpoint_problem(path)
        if problem is None:
            return str(path)
        logger.warning(
            "Skipping the incomplete checkpoint %s (%s: its writing was interrupted); looking for an older one.",
            path,
            problem,
        )
    return None


def _wants_latest(resume) -> bool:
    return resume is True or (isinstance(resume, str) and resume.lower() == "true")


def _nothing_to_resume(error, where: str) -> TokswapError:
    return error(
        f"resume_from_checkpoint=True (--resume) but there is no complete checkpoint under {where}: nothing to "
        "resume. Drop --resume (resume_from_checkpoint) to start a fresh run, or give the checkpoint folder to "
        "resume from."
    )


def _existing_checkpoint(resume, error) -> Path:
    path = Path(resume)
    if not path.is_dir():
        raise error(
            f"Checkpoint {resume} does not exist; give an existing checkpoint-N folder, or --resume alone "
            "for the newest one."
        )
    return path


def _checked_checkpoint(resume, error) -> Path:
    """The explicit checkpoint folder `resume`, refused with `error` when it is missing or incomplete."""
    path = _existing_checkpoint(resume, error)
    problem = checkpoint_problem(path)
    if problem is not None:
        raise error(
            f"Checkpoint {resume} is incomplete ({problem}: its writing was interrupted); give an earlier "
            "checkpoint, or --resume alone for the newest complete one."
        )
    return path


def resolve_resume_checkpoint(resume, output_dir, error=None) -> Optional[str]:
    """The checkpoint a single-stage run (`distill`, `self_distill`) resumes from, or None when `resume` is falsy.

    Args:
        resume (`bool` or `str`): `True` (or `"true"`) for the newest complete checkpoint under `output_dir`, or a
            checkpoint folder.
        output_dir: the run's output folder.
        error: the `TokswapError` subclass to raise (defaults to `TrainingError`).

    Raises:
        `error`: `resume=True` and no complete checkpoint exists, or the folder given is missing or incomplete.
    """
    error = error or TrainingError
    if not resume:
        return None
    if _wants_latest(resume):
        found = latest_checkpoint(output_dir)
        if found is None:
            raise _nothing_to_resume(error, str(output_dir))
        return found
    return str(_checked_checkpoint(resume, error))


def prepare_run_dir(output_dir, kind: str, resume=None) -> None:
    """Before a run writes anything: refuse an `output_dir` holding files tokswap did not write (see
    `tokswap.utils.run_folder`); the main process then marks the folder as a tokswap run."""
    if is_main_process():
        claim_run_dir(output_dir, kind, resume)
    else:
        check_run_dir(output_dir, resume)


def train_single_stage(trainer, error=None):
    """`trainer.train()` for a one-stage run (`distill`, `self_distill`): resumed where `trainer.args` asks, with the
    (padded) vocabulary never shrunk. Returns the trainer.

    Raises:
        `error`: `resume_from_checkpoint` names nothing to resume from (see `resolve_resume_checkpoint`).
    """
    args = trainer.args
    check_run_dir(args.output_dir, args.resume_from_checkpoint)
    checkpoint = resolve_resume_checkpoint(args.resume_from_checkpoint, args.output_dir, error)
    prepare_run_dir(args.output_dir, type(trainer).__name__, args.resume_from_checkpoint)  # nothing failed: mark it
    with never_shrink_vocabulary(trainer.accelerator.unwrap_model(trainer.model)):
        trainer.train(resume_from_checkpoint=checkpoint)
    return trainer


def load_training_dataset(path: Union[str, os.PathLike], split: str = "train"):
    """Load a training set from a `.txt` file (one document per blank-line-separated paragraph, or per line when
    the file has no blank line; documents over 1 MB cut at line breaks or spaces), a `.jsonl` /
    `.json` file (a `text` or `input_ids` field per record), a `.parquet` file, a `save_to_disk` folder, or a
    folder of such files.

    Returns:
        `datasets.Dataset`
    """
    import datasets

    path = Path(path)
    if not path.exists():
        raise TrainingError(f"Dataset {path} does not exist.")
    if path.is_dir():
        if (
            (path / "dataset_info.json").is_file()
            or (path / "state.json").is_file()
            or (path / "dataset_dict.json").is_file()
        ):
            loaded = datasets.load_from_disk(str(path))
            if isinstance(loaded, datasets.DatasetDict):
                if split not in loaded:
                    raise TrainingError(f"{path} has splits {list(loaded)}, not {split!r}.")
                loaded = loaded[split]
            return loaded
        files = sorted(p for p in path.rglob("*") if p.suffix in (".txt", ".jsonl", ".json", ".parquet"))
        if not files:
            raise TrainingError(f"{path} holds no .txt, .jsonl, .json or .parquet files and is not a saved dataset.")
        suffixes = {p.suffix for p in files}
        if len(suffixes) > 1:
            raise TrainingError(f"{path} mixes file types {sorted(suffixes)}; keep one kind per folder.")
        return _load_files([str(p) for p in files], files[0].suffix, split)
    return _load_files([str(path)], path.suffix, split)


def _text_file_records(files: list[str], stamps: list):
    """`{"text": document}` for each document of each plain-text file (`stamps` only key the datasets cache)."""
    from tokswap.utils.text_files import iter_text_documents

    for file in files:
        for text in iter_text_documents(file):
            yield {"text": text}


def _load_files(files: list[str], suffix: str, split: str):
    import datasets

    if suffix in (".txt", ".jsonl", ".json"):
        from tokswap.utils.text_files import check_utf8_file

        for file in files:  # datasets would fail deep inside its builder, with a traceback
            check_utf8_file(file, TrainingError)

    if suffix == ".txt":
        # As `tokswap align` reads them (`tokswap.offline.corpus.read_text_documents`): paragraphs when a file separates
        # them with blank lines, else one document per line, and documents over 1 MB cut at line breaks or spaces
        # (datasets' text loader would make one 50 MB line one 50 MB row). The files' sizes and modification
        # times are part of the cache key, so an edited file is read again.
        stamps = [(os.stat(file).st_size, os.stat(file).st_mtime_ns) for file in files]
        return datasets.Dataset.from_generator(
            _text_file_records,
            gen_kwargs={"files": files, "stamps": stamps},
            features=datasets.Features({"text": datasets.Value("string")}),
            split=datasets.NamedSplit(split),
        )
    if suffix in (".jsonl", ".json"):
        return datasets.load_dataset("json", data_files={split: files}, split=split)
    if suffix == ".parquet":
        return datasets.load_dataset("parquet", data_files={split: files}, split=split)
    raise TrainingError(
        f"Unsupported dataset file type {suffix!r}: use .txt, .jsonl, .json, .parquet or a dataset folder."
    )


def load_model_for_training(model_dir: str, **kwargs):
    """Load a causal LM and its tokenizer for training: the best attention kernel available, bf16 weights on a
    bf16-capable GPU, float32 otherwise."""
    from tokswap.loading import load_model, model_tokenizer

    check_local_path(model_dir, "The model")
    kwargs.setdefault("attn_implementation", pick_attn_implementation())
    kwargs.setdefault("dtype", torch.bfloat16 if bf16_supported() else torch.float32)
    try:
        model = load_model(model_dir, **kwargs)
    except (OSError, ValueError) as err:
        if kwargs.get("attn_implementation") != "flash_attention_2":
            raise
        logger.warning("flash_attention_2 unavailable for this model (%s); using sdpa.", err)
        model = load_model(model_dir, **{**kwargs, "attn_implementation": "sdpa"})
    return model, model_tokenizer(model_dir)
