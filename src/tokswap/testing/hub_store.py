"""Storage behind the loopback Hub: repositories, commits and content-addressed objects.

Every commit holds a full snapshot of its tree (`{path: FileEntry}`), so reading any revision is a
dictionary lookup. File contents live once on disk, addressed by their hash:

    <root>/objects/git/<sha1>     regular files, keyed by their git blob id
    <root>/objects/lfs/<sha256>   LFS files, keyed by the sha256 of their content
    <root>/repos/<type>s/<namespace>/<name>.json   branches, tags and commits of one repository

Only the standard library is used here, so that importing it never imports `huggingface_hub`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import posixpath
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

REPO_TYPES = ("model", "dataset", "space")
DEFAULT_BRANCH = "main"

# Files at or above this size always go through LFS (the Hub's own threshold is 10 MB).
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024

# The `.gitattributes` a new repository starts with: binary formats of the ML world go through LFS.
_LFS_PATTERNS = (
    "*.7z",
    "*.arrow",
    "*.bin",
    "*.bz2",
    "*.ckpt",
    "*.ftz",
    "*.gguf",
    "*.gz",
    "*.h5",
    "*.joblib",
    "*.lfs.*",
    "*.mlmodel",
    "*.model",
    "*.msgpack",
    "*.npy",
    "*.npz",
    "*.onnx",
    "*.ot",
    "*.parquet",
    "*.pb",
    "*.pickle",
    "*.pkl",
    "*.pt",
    "*.pth",
    "*.rar",
    "*.safetensors",
    "saved_model/**/*",
    "*.tar.*",
    "*.tar",
    "*.tflite",
    "*.tgz",
    "*.wasm",
    "*.xz",
    "*.zip",
    "*.zst",
    "*tfevents*",
)
_DATASET_LFS_PATTERNS = ("*.mds", "*.mp3", "*.ogg", "*.wav", "*.flac", "*.jpg", "*.jpeg", "*.png", "*.webp")
_COMMIT_ID = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHORT_COMMIT_ID = re.compile(r"^[0-9a-f]{7,40}$")
_REPO_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_BRANCH_NAME = re.compile(r"^(?!refs/)(?!.*\.\.)[A-Za-z0-9._/-]{1,200}$")


class HubError(Exception):
    """An error the Hub answers with: HTTP status, `X-Error-Code` header (may be None) and message."""

    def __init__(self, status: int, code: Optional[str], message: str, headers: Optional[Mapping[str, str]] = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def repo_not_found(repo_id: str) -> HubError:
    return HubError(404, "RepoNotFound", f"Repository not found: {repo_id}")


def utc_timestamp(seconds: Optional[float] = None) -> str:
    """Format a time the way the Hub does: `2024-05-01T12:00:00.000Z`."""
    seconds = time.time() if seconds is None else seconds
    millis = int(round((seconds % 1) * 1000)) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def git_blob_id(data: bytes) -> str:
    """The id git gives a blob: sha1 of `blob <size>\\0<content>`."""
    digest = hashlib.sha1(f"blob {len(data)}\0".encode())
    digest.update(data)
    return digest.hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The small text file git stores in place of an LFS object."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def validate_repo_id(repo_id: str) -> Tuple[str, str]:
    """Split `namespace/name`; the loopback Hub only knows namespaced ids."""
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(_REPO_PART.match(part) for part in parts) or ".." in repo_id:
        raise HubError(400, None, f"Invalid repo id {repo_id!r}: expected 'namespace/name'.")
    return parts[0], parts[1]


def validate_path_in_repo(path: str) -> str:
    path = path.strip("/")
    if not path or any(part in ("", ".", "..") for part in path.split("/")):
        raise HubError(400, None, f"Invalid path in repository: {path!r}")
    return path


@dataclass(frozen=True)
class FileEntry:
    """One file of a tree: its size, its git blob id and, for LFS files, the sha256 of the content."""

    size: int
    git_oid: str
    lfs_sha256: Optional[str] = None

    @property
    def is_lfs(self) -> bool:
        return self.lfs_sha256 is not None

    @property
    def etag(self) -> str:
        """What `/resolve` answers as ETag: the LFS sha256, else the git blob id."""
        return self.lfs_sha256 or self.git_oid

    @property
    def pointer_size(self) -> int:
        return len(lfs_pointer(self.lfs_sha256, self.size)) if self.lfs_sha256 else 0

    def to_json(self) -> list:
        return [self.size, self.git_oid, self.lfs_sha256]

    @classmethod
    def from_json(cls, value: list) -> FileEntry:
        return cls(size=value[0], git_oid=value[1], lfs_sha256=value[2])


@dataclass
class Commit:
    id: str
    parents: List[str]
    title: str
    message: str
    author: str
    date: str
    tree: Dict[str, FileEntry]

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "parents": self.parents,
            "title": self.title,
            "message": self.message,
            "author": self.author,
            "date": self.date,
            "tree": {path: entry.to_json() for path, entry in sorted(self.tree.items())},
        }

    @classmethod
    def from_json(cls, data: dict) -> Commit:
        tree = {path: FileEntry.from_json(value) for path, value in data["tree"].items()}
        return cls(data["id"], data["parents"], data["title"], data["message"], data["author"], data["date"], tree)

    def directories(self) -> List[str]:
        """Every folder that holds a file of this commit (for tree listings)."""
        folders = set()
        for path in self.tree:
            parent = posixpath.dirname(path)
            while parent:
                folders.add(parent)
                parent = posixpath.dirname(parent)
        return sorted(folders)

    def folder_id(self, folder: str) -> str:
        """A stable stand-in for the git tree id of `folder`."""
        prefix = folder.rstrip("/") + "/" if folder else ""
        digest = hashlib.sha1()
        for path, entry in sorted(self.tree.items()):
            if path.startswith(prefix):
                digest.update(f"{path}\0{entry.git_oid}\n".encode())
        return digest.hexdigest()


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    owner: Optional[str]
    created_at: str
    branches: Dict[str, str] = field(default_factory=dict)
    tags: Dict[str, str] = field(default_factory=dict)
    commits: Dict[str, Commit] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        return self.repo_id.split("/")[0]

    def head(self, branch: str = DEFAULT_BRANCH) -> Optional[Commit]:
        commit_id = self.branches.get(branch)
        return self.commits[commit_id] if commit_id else None

    def resolve(self, revision: str) -> Commit:
        """Branch, tag, full or abbreviated commit id -> commit; RevisionNotFound otherwise."""
        revision = revision or DEFAULT_BRANCH
        for prefix, refs in (("refs/heads/", self.branches), ("refs/tags/", self.tags)):
            if revision.startswith(prefix) and revision[len(prefix) :] in refs:
                return self.commits[refs[revision[len(prefix) :]]]
        if revision in self.branches:
            return self.commits[self.branches[revision]]
        if revision in self.tags:
            return self.commits[self.tags[revision]]
        if revision in self.commits:
            return self.commits[revision]
        if _SHORT_COMMIT_ID.match(revision):
            matches = [commit_id for commit_id in self.commits if commit_id.startswith(revision)]
            if len(matches) == 1:
                return self.commits[matches[0]]
        raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")

    def history(self, commit: Commit) -> Iterator[Commit]:
        """`commit` and its first-parent ancestors, newest first."""
        while commit is not None:
            yield commit
            commit = self.commits[commit.parents[0]] if commit.parents else None

    def last_commit_touching(self, commit: Commit, path: str) -> Commit:
        """The newest commit in the history of `commit` that changed `path` (a file or a folder)."""

        def state(snapshot: Commit):
            if path in snapshot.tree:
                return snapshot.tree[path].git_oid
            return snapshot.folder_id(path) if any(p.startswith(path + "/") for p in snapshot.tree) else None

        current = state(commit)
        newest = commit
        for ancestor in self.history(commit):
            if state(ancestor) != current:
                break
            newest = ancestor
        return newest

    def to_json(self) -> dict:
        return {
            "repo_type": self.repo_type,
            "repo_id": self.repo_id,
            "private": self.private,
            "owner": self.owner,
            "created_at": self.created_at,
            "branches": self.branches,
            "tags": self.tags,
            "commits": [commit.to_json() for commit in self.commits.values()],
        }

    @classmethod
    def from_json(cls, data: dict) -> Repo:
        repo = cls(
            data["repo_type"],
            data["repo_id"],
            data["private"],
            data["owner"],
            data["created_at"],
            dict(data["branches"]),
            dict(data["tags"]),
        )
        for commit_data in data["commits"]:
            commit = Commit.from_json(commit_data)
            repo.commits[commit.id] = commit
        return repo


def default_gitattributes(repo_type: str) -> bytes:
    patterns = _LFS_PATTERNS + (_DATASET_LFS_PATTERNS if repo_type == "dataset" else ())
    return "".join(f"{pattern} filter=lfs diff=lfs merge=lfs -text\n" for pattern in patterns).encode()


def lfs_patterns_from_gitattributes(content: bytes) -> List[str]:
    patterns = []
    for line in content.decode("utf-8", errors="replace").splitlines():
        fields = line.split()
        if len(fields) >= 2 and not fields[0].startswith("#") and "filter=lfs" in fields[1:]:
            patterns.append(fields[0])
    return patterns


def _matches_gitattributes(path: str, pattern: str) -> bool:
    if "/" in pattern:  # anchored at the repository root; `**` spans folders
        return fnmatch.fnmatch(path, pattern.lstrip("/")) or fnmatch.fnmatch(path, pattern.replace("**/", ""))
    return fnmatch.fnmatch(posixpath.basename(path), pattern)


def looks_binary(sample: bytes) -> bool:
    """True when the first bytes of a file are not UTF-8 text (a cut multi-byte character at the end is fine)."""
    if b"\x00" in sample:
        return True
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start < len(sample) - 3
    return False


class HubStore:
    """Repositories and their commits, kept on disk under `root` and guarded by one lock.

    Args:
        root (`str` or `Path`):
            Folder for objects and repository metadata. Existing repositories there are loaded, so a
            store survives restarts of the server.
    """

    def __init__(self, root):
        self.root = Path(root)
        self._objects = self.root / "objects"
        self._repos_dir = self.root / "repos"
        for sub in (self._objects / "git", self._objects / "lfs", self._objects / "tmp", self._repos_dir):
            sub.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._repos: Dict[Tuple[str, str], Repo] = {}
        for metadata in self._repos_dir.glob("*/*/*.json"):
            repo = Repo.from_json(json.loads(metadata.read_text()))
            self._repos[(repo.repo_type, repo.repo_id)] = repo

    # ----------------------------------------------------------------- objects
    def object_path(self, entry: FileEntry) -> Path:
        if entry.is_lfs:
            return self._lfs_path(entry.lfs_sha256)
        return self._objects / "git" / entry.git_oid[:2] / entry.git_oid

    def _lfs_path(self, sha256: str) -> Path:
        if not _SHA256.match(sha256 or ""):  # also keeps client-given ids from naming other files
            raise HubError(422, None, f"Invalid LFS oid {sha256!r}: expected a sha256 hex digest.")
        return self._objects / "lfs" / sha256[:2] / sha256

    def has_lfs_object(self, sha256: str, size: Optional[int] = None) -> bool:
        path = self._lfs_path(sha256)
        return path.is_file() and (size is None or path.stat().st_size == size)

    def lfs_entry(self, sha256: str) -> FileEntry:
        """The tree entry for an LFS object that is already stored (its size is read from disk)."""
        path = self._lfs_path(sha256)
        if not path.is_file():
            raise HubError(422, None, f"LFS object {sha256} was never uploaded; upload it before committing.")
        size = path.stat().st_size
        return FileEntry(size=size, git_oid=git_blob_id(lfs_pointer(sha256, size)), lfs_sha256=sha256)

    def add_bytes(self, data: bytes, lfs: bool = False) -> FileEntry:
        """Store `data` as a regular git blob (or an LFS object) and return its tree entry."""
        if lfs:
            sha256 = hashlib.sha256(data).hexdigest()
            if not self.has_lfs_object(sha256, len(data)):
                self._write_object(self._lfs_path(sha256), data)
            return self.lfs_entry(sha256)
        entry = FileEntry(size=len(data), git_oid=git_blob_id(data))
        path = self.object_path(entry)
        if not path.is_file():
            self._write_object(path, data)
        return entry

    def add_lfs_stream(self, stream: BinaryIO, size: int, expected_sha256: str) -> FileEntry:
        """Store exactly `size` bytes read from `stream` as an LFS object; its sha256 must match."""
        digest = hashlib.sha256()
        fd, tmp = tempfile.mkstemp(dir=self._objects / "tmp")
        try:
            with os.fdopen(fd, "wb") as out:
                remaining = size
                while remaining:
                    block = stream.read(min(remaining, 1 << 20))
                    if not block:
                        raise HubError(400, None, f"Upload ended after {size - remaining} of {size} bytes.")
                    digest.update(block)
                    out.write(block)
                    remaining -= len(block)
            if digest.hexdigest() != expected_sha256:
                raise HubError(400, None, f"Uploaded content does not match its sha256 {expected_sha256}.")
            final = self._lfs_path(expected_sha256)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, final)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return self.lfs_entry(expected_sha256)

    def add_file(self, source: Path, lfs: bool) -> FileEntry:
        """Store a local file. LFS objects are hard-linked when possible (no copy of big weights)."""
        source = Path(source)
        if not lfs:
            return self.add_bytes(source.read_bytes())
        digest = hashlib.sha256()
        with open(source, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        sha256 = digest.hexdigest()
        if not self.has_lfs_object(sha256):
            final = self._lfs_path(sha256)
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._objects / "tmp" / f"{sha256}.{os.getpid()}.{threading.get_ident()}"
            try:
                os.link(os.path.realpath(source), tmp)
            except OSError:  # another file system, or links not allowed
                shutil.copyfile(source, tmp)
            os.replace(tmp, final)
        return self.lfs_entry(sha256)

    def _write_object(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self._objects / "tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)

    def read_bytes(self, entry: FileEntry) -> bytes:
        return self.object_path(entry).read_bytes()

    # ------------------------------------------------------------ repositories
    def get_repo(self, repo_type: str, repo_id: str) -> Optional[Repo]:
        with self._lock:
            return self._repos.get((repo_type, repo_id))

    def list_repos(self) -> List[Repo]:
        with self._lock:
            return list(self._repos.values())

    def create_repo(self, repo_type: str, repo_id: str, private: bool = False, owner: Optional[str] = None) -> Repo:
        """Create a repository whose first commit holds the default `.gitattributes`, as on the Hub."""
        if repo_type not in REPO_TYPES:
            raise HubError(400, None, f"Invalid repo type {repo_type!r}.")
        validate_repo_id(repo_id)
        with self._lock:
            if (repo_type, repo_id) in self._repos:
                raise HubError(409, None, f"You already created this {repo_type} repo: {repo_id}")
            repo = Repo(repo_type, repo_id, bool(private), owner, utc_timestamp())
            self._repos = {**self._repos, (repo_type, repo_id): repo}
            gitattributes = self.add_bytes(default_gitattributes(repo_type))
            self.commit(
                repo,
                DEFAULT_BRANCH,
                {".gitattributes": gitattributes},
                title="initial commit",
                author=owner or repo.namespace,
                allow_new_branch=True,
            )
            return repo

    def delete_repo(self, repo: Repo) -> None:
        with self._lock:
            self._repos = {key: value for key, value in self._repos.items() if value is not repo}
            metadata = self._metadata_path(repo)
            if metadata.exists():
                metadata.unlink()

    def set_private(self, repo: Repo, private: bool) -> None:
        with self._lock:
            repo.private = bool(private)
            self._save(repo)

    # ----------------------------------------------------------------- commits
    def upload_mode(self, repo: Repo, revision: str, path: str, size: int, sample: bytes) -> str:
        """`"lfs"` or `"regular"`, decided like the Hub: size, `.gitattributes` patterns, binary content."""
        if size >= LFS_SIZE_THRESHOLD:
            return "lfs"
        try:
            head = repo.resolve(revision)
        except HubError:
            head = repo.head()
        attributes = head.tree.get(".gitattributes") if head else None
        patterns = lfs_patterns_from_gitattributes(self.read_bytes(attributes)) if attributes else []
        if any(_matches_gitattributes(path, pattern) for pattern in patterns):
            return "lfs"
        return "lfs" if size and looks_binary(sample) else "regular"

    def commit(
        self,
        repo: Repo,
        branch: str,
        additions: Mapping[str, FileEntry],
        deletions: Iterable[str] = (),
        deleted_folders: Iterable[str] = (),
        title: str = "Upload files",
        message: str = "",
        author: str = "loopback",
        parent_commit: Optional[str] = None,
        allow_new_branch: bool = False,
    ) -> Commit:
        """Apply deletions then additions on top of `branch`'s head and move the branch to the new commit.

        Raises `HubError` like the Hub: unknown branch (RevisionNotFound), `parent_commit` not the head
        (412), deleting a file that does not exist (EntryNotFound).
        """
        with self._lock:
            head = repo.head(branch)
            if head is None and not allow_new_branch:
                if branch in repo.tags or branch in repo.commits:
                    raise HubError(400, None, f"Cannot commit to {branch!r}: it is not a branch.")
                raise HubError(404, "RevisionNotFound", f"Invalid rev id: {branch}")
            if parent_commit and head is not None and parent_commit != head.id:
                raise HubError(412, None, "A commit has happened since. Please refresh and try again.")
            tree = dict(head.tree) if head else {}
            for path in deletions:
                path = path.strip("/")
                if path not in tree:
                    raise HubError(404, "EntryNotFound", f"A file with this name doesn't exist: {path}")
                del tree[path]
            for folder in deleted_folders:
                prefix = folder.strip("/") + "/"
                doomed = [path for path in tree if path.startswith(prefix)]
                if not doomed:
                    raise HubError(404, "EntryNotFound", f"A folder with this name doesn't exist: {folder}")
                for path in doomed:
                    del tree[path]
            for path, entry in additions.items():
                path = validate_path_in_repo(path)
                if any(existing.startswith(path + "/") for existing in tree):
                    raise HubError(400, None, f"Cannot add file {path}: a folder with that name exists.")
                tree[path] = entry
            date = utc_timestamp()
            parents = [head.id] if head else []
            payload = json.dumps(
                {
                    "parents": parents,
                    "title": title,
                    "message": message,
                    "author": author,
                    "date": date,
                    "nonce": len(repo.commits),
                    "tree": {p: e.to_json() for p, e in sorted(tree.items())},
                },
                sort_keys=True,
            )
            commit = Commit(hashlib.sha1(payload.encode()).hexdigest(), parents, title, message, author, date, tree)
            # Copy-on-write: requests read these dicts without the lock.
            repo.commits = {**repo.commits, commit.id: commit}
            repo.branches = {**repo.branches, branch: commit.id}
            self._save(repo)
            return commit

    # -------------------------------------------------------------------- refs
    def create_branch(self, repo: Repo, branch: str, starting_point: Optional[str] = None) -> None:
        if not _BRANCH_NAME.match(branch) or _COMMIT_ID.match(branch):
            raise HubError(400, None, f"Invalid reference for a branch: {branch}")
        with self._lock:
            if branch in repo.branches:
                raise HubError(409, None, f"Reference already exists: refs/heads/{branch}")
            repo.branches = {**repo.branches, branch: repo.resolve(starting_point or DEFAULT_BRANCH).id}
            self._save(repo)

    def delete_branch(self, repo: Repo, branch: str) -> None:
        with self._lock:
            if branch == DEFAULT_BRANCH:
                raise HubError(403, None, "Cannot delete the default branch.")
            if branch not in repo.branches:
                raise HubError(404, "RevisionNotFound", f"Invalid rev id: {branch}")
            repo.branches = {name: target for name, target in repo.branches.items() if name != branch}
            self._save(repo)

    def create_tag(self, repo: Repo, tag: str, revision: str) -> None:
        if not _BRANCH_NAME.match(tag):
            raise HubError(400, None, f"Invalid tag name: {tag}")
        with self._lock:
            if tag in repo.tags:
                raise HubError(409, None, f"Tag already exists: {tag}")
            repo.tags = {**repo.tags, tag: repo.resolve(revision).id}
            self._save(repo)

    def delete_tag(self, repo: Repo, tag: str) -> None:
        with self._lock:
            if tag not in repo.tags:
                raise HubError(404, "RevisionNotFound", f"Invalid rev id: {tag}")
            repo.tags = {name: target for name, target in repo.tags.items() if name != tag}
            self._save(repo)

    # ------------------------------------------------------------- persistence
    def _metadata_path(self, repo: Repo) -> Path:
        namespace, name = repo.repo_id.split("/")
        return self._repos_dir / f"{repo.repo_type}s" / namespace / f"{name}.json"

    def _save(self, repo: Repo) -> None:
        path = self._metadata_path(repo)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as out:
            json.dump(repo.to_json(), out)
        os.replace(tmp, path)
