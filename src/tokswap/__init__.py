"""tokswap: give any Hugging Face causal LM a new tokenizer (TokAlign) and train it back to health."""

__version__ = "0.1.0"

from .alignment import TokenAlignment  # noqa: E402

__all__ = ["TokenAlignment", "__version__"]
