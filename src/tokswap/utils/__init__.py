from tokswap.utils.io import (
    MissingPathError,
    OutputExistsError,
    atomic_output_dir,
    atomic_output_file,
    cache_dir,
    check_local_path,
    check_output_dir,
    looks_like_local_path,
    sha256_file,
)
from tokswap.utils.logging import get_logger

__all__ = [
    "MissingPathError",
    "OutputExistsError",
    "atomic_output_dir",
    "atomic_output_file",
    "cache_dir",
    "check_local_path",
    "check_output_dir",
    "get_logger",
    "looks_like_local_path",
    "sha256_file",
]
