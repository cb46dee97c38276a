from .io import atomic_output_dir, atomic_output_file, cache_dir, sha256_file
from .logging import get_logger

__all__ = ["atomic_output_dir", "atomic_output_file", "cache_dir", "get_logger", "sha256_file"]
