"""tokswap: give any Hugging Face causal LM a new tokenizer (TokAlign) and train it back to health.

The top-level names are imported lazily so that `import tokswap` stays cheap and never imports
transformers or huggingface_hub before the caller has set the Hub environment variables.
"""

import importlib

from tokswap.constants import __version__

_LAZY_EXPORTS = {
    "TokenAlignment": "tokswap.alignment",
    "AlignmentError": "tokswap.alignment",
    "UnverifiedAlignmentError": "tokswap.alignment",
    "RowSource": "tokswap.alignment",
    "AlignmentConfig": "tokswap.align.pipeline",
    "align_tokenizers": "tokswap.align.pipeline",
    "TokenizerSwapper": "tokswap.swapper",
    "swap_vocabulary": "tokswap.surgery",
    "INIT_METHODS": "tokswap.init_methods",
    "VocabAdaptationConfig": "tokswap.training",
    "adapt_vocabulary": "tokswap.training",
    "TokenDistillationConfig": "tokswap.distillation",
    "TokenDistillationTrainer": "tokswap.distillation",
    "make_draft": "tokswap.swapper",
    "measure_speculative_decoding": "tokswap.drafting",
    "evaluate": "tokswap.evaluation",
    "bits_per_byte": "tokswap.evaluation",
    "TokswapError": "tokswap.errors",
}

__all__ = ["__version__", *_LAZY_EXPORTS]


def __getattr__(name):
    module_name = _LAZY_EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'tokswap' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
