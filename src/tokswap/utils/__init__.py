from tokswap.utils.io import (
    MissingPathError,
    OutputExistsError,
    OutputNotWritableError,
    atomic_output_dir,
    atomic_output_file,
    cache_dir,
    check_can_create,
    check_local_path,
    check_output_dir,
    check_output_file,
    looks_like_local_path,
    sha256_file,
)
from tokswap.utils.logging import get_logger
from tokswap.utils.run_folder import check_run_dir, claim_run_dir

__all__ = [
    "MissingPathError",
    "OutputExistsError",
    "OutputNotWritableError",
    "atomic_output_dir",
    "atomic_output_file",
    "cache_dir",
    "check_can_create",
    "check_local_path",
    "check_output_dir",
    "check_output_file",
    "check_run_dir",
    "claim_run_dir",
    "get_logger",
    "looks_like_local_path",
    "sha256_file",
]
