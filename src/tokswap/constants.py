"""The names tokswap writes and reads: its version, its file names, its environment variables.

One place, so a file written by one module and read by another can never disagree on its name.
"""

__version__ = "0.1.0"

# files tokswap writes
ALIGNMENT_WEIGHTS_NAME = "alignment.safetensors"  # a TokenAlignment's arrays
ALIGNMENT_CONFIG_NAME = "alignment_config.json"  # ... and its metadata (tokenizers, provenance, metrics)
INTEGRITY_KEY = "integrity"  # the block of alignment_config.json holding the checksums
ALIGNMENT_SUBFOLDER = "alignment"  # inside a swapped model's folder: the alignment it was made with
TOKSWAP_CONFIG_NAME = "tokswap_config.json"  # beside a swapped model: how it was made; marks the folder as ours
CARD_NAME = "README.md"  # the model / alignment card
RUN_MARKER_NAME = "tokswap_run.json"  # in a train / distill output folder: marks it as a tokswap run
INDEX_REPO_NAME = "index"  # the Hub repo listing prebuilt alignments

# environment variables tokswap reads (besides huggingface_hub's HF_* ones)
ENV_CACHE = "TOKSWAP_CACHE"  # root of tokswap's cache (assets, corpora, counts); default ~/.cache/tokswap
ENV_VERBOSITY = "TOKSWAP_VERBOSITY"  # log level of the `tokswap` logger
ENV_DEBUG = "TOKSWAP_DEBUG"  # the CLI shows tracebacks of user errors
ENV_TELEMETRY = "TOKSWAP_TELEMETRY"  # allow TRL's usage ping (off by default)
ENV_ALIGNMENT_ENDPOINT = "TOKSWAP_ALIGNMENT_ENDPOINT"  # Hub that serves prebuilt alignments
ENV_ALIGNMENT_NAMESPACE = "TOKSWAP_ALIGNMENT_NAMESPACE"  # its namespace
ENV_ALIGNMENT_TOKEN = "TOKSWAP_ALIGNMENT_TOKEN"  # its token (HF_TOKEN is never sent to another host)
ENV_NO_PREBUILT_ALIGNMENTS = "TOKSWAP_NO_PREBUILT_ALIGNMENTS"  # always compute alignments locally
ENV_ON_ALIGNMENT_MISMATCH = "TOKSWAP_ON_ALIGNMENT_MISMATCH"  # "error" or "recompute"
