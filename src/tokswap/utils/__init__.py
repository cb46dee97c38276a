from .io import OutputExistsError, atomic_output_dir, atomic_output_file, cache_dir, check_output_dir, sha256_file
from .logging import get_logger

__all__ = [
    "OutputExistsError",
    "atomic_output_dir",
    "atomic_output_file",
    "cache_dir",
    "check_output_dir",
    "get_logger",
    "sha256_file",
]
