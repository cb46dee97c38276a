"""A loopback Hugging Face Hub: just enough of the Hub's HTTP protocol for the real clients.

`huggingface_hub`, `transformers` and `datasets`, unmodified, can create repositories, push
(regular files and git-LFS "basic" transfers), download (`hf_hub_download`, `snapshot_download`,
`from_pretrained`, `load_dataset`), list trees, refs and commits, and pin revisions against it.
Errors carry the Hub's `X-Error-Code` headers, so the clients raise their usual exceptions
(`RepositoryNotFoundError`, `RevisionNotFoundError`, `EntryNotFoundError`).

Usage in tests (the client settings must be in the environment before `huggingface_hub` is imported):

```python
from tokswap.testing import LoopbackHub, hub_client_env

with LoopbackHub(tokens={"hf_test": "alice"}) as hub:
    hub.seed_folder("HuggingFaceTB/SmolLM2-135M", "/path/to/model_folder")
    env = hub_client_env(hub.endpoint, hf_home="/tmp/hf-home", token="hf_test")
```

Standalone (notebooks, bench scripts):

    python -m tokswap.testing.hub_server --port 8765 --storage /tmp/hub --token "$HF_TOKEN"

Access rules: anyone may read public repositories; private repositories and every write need a
valid token whose user owns the namespace. By default (`orgs=None`) every user belongs to every
organisation, so tests can push under any namespace; pass `orgs={"alice": ["my-org"]}` to model
real memberships. Tokens are never logged or echoed.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import sys
import tempfile
import threading
import weakref
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple
from urllib.parse import parse_qs, quote, unquote, urlsplit

from tokswap.testing.hub_store import (
    DEFAULT_BRANCH,
    Commit,
    FileEntry,
    HubError,
    HubStore,
    Repo,
    repo_not_found,
    utc_timestamp,
    validate_path_in_repo,
    validate_repo_id,
)

logger = logging.getLogger("tokswap.testing.hub_server")

_PLURAL_TO_TYPE = {"models": "model", "datasets": "dataset", "spaces": "space"}
_URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
_INVALID_CREDENTIALS = "Invalid credentials in Authorization header"
_CHUNK = 1 << 20


def _truthy(values: Optional[List[str]]) -> bool:
    return bool(values) and values[-1].lower() in ("1", "true", "yes")


def _split_front_matter(text: str) -> Tuple[Optional[str], str]:
    """(YAML block or None, body) of a README with `---` front matter."""
    if not text.startswith("---"):
        return None, text
    match = re.match(r"^---[ \t]*\r?\n(.*?)(?:\r?\n)?---[ \t]*(?:\r?\n|$)", text, flags=re.S)
    if match is None:
        return None, text
    return match.group(1), text[match.end() :]


def parse_card_metadata(text: str) -> Optional[dict]:
    """The YAML metadata of a model/dataset card, or None when it has none or it does not parse."""
    import yaml  # PyYAML is a dependency of huggingface_hub

    block, _ = _split_front_matter(text)
    if block is None:
        return None
    try:
        data = yaml.safe_load(block)
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) else None


class _ChunkedReader:
    """File-like view of a `Transfer-Encoding: chunked` request body."""

    def __init__(self, raw):
        self._raw = raw
        self._left = 0
        self._done = False

    def read(self, size: int = -1) -> bytes:
        out = bytearray()
        while not self._done and (size < 0 or len(out) < size):
            if self._left == 0:
                line = self._raw.readline(65537)
                chunk_size = int(line.split(b";")[0].strip() or b"0", 16)
                if chunk_size == 0:
                    while self._raw.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    self._done = True
                    break
                self._left = chunk_size
            want = self._left if size < 0 else min(self._left, size - len(out))
            block = self._raw.read(want)
            if not block:
                raise HubError(400, None, "Truncated chunked body.")
            out += block
            self._left -= len(block)
            if self._left == 0:
                self._raw.readline(3)  # CRLF after each chunk
        return bytes(out)

    @property
    def exhausted(self) -> bool:
        return self._done


class _LengthReader:
    def __init__(self, raw, length: int):
        self._raw = raw
        self._left = length

    def read(self, size: int = -1) -> bytes:
        size = self._left if size < 0 else min(size, self._left)
        block = self._raw.read(size) if size else b""
        self._left -= len(block)
        return block

    @property
    def exhausted(self) -> bool:
        return self._left == 0


class _HubHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, hub: LoopbackHub):
        self.hub = hub
        super().__init__(address, HubRequestHandler)


class HubRequestHandler(BaseHTTPRequestHandler):
    """Maps Hub routes to `HubStore` operations. One instance per request; see `ROUTES`."""

    protocol_version = "HTTP/1.1"
    server_version = "tokswap-loopback-hub/1.0"
    server: _HubHTTPServer

    # ------------------------------------------------------------------ plumbing
    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def log_message(self, format, *args):  # noqa: A002 (BaseHTTPRequestHandler's signature)
        # Only the request line reaches here (never headers, so never a token).
        logger.debug("%s - %s", self.address_string(), format % args)

    @property
    def hub(self) -> LoopbackHub:
        return self.server.hub

    @property
    def store(self) -> HubStore:
        return self.server.hub.store

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self.query = parse_qs(url.query, keep_blank_values=True)
        self.base_url = f"http://{self.headers.get('Host') or '{}:{}'.format(*self.server.server_address[:2])}"
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.body_stream = _ChunkedReader(self.rfile)
        else:
            self.body_stream = _LengthReader(self.rfile, int(self.headers.get("Content-Length") or 0))
        try:
            for methods, pattern, handler in ROUTES:
                match = pattern.fullmatch(url.path)
                if match and method in methods:
                    self.user = self._authenticate()
                    groups = {k: (unquote(v) if v is not None else None) for k, v in match.groupdict().items()}
                    handler(self, **groups)
                    while not self.body_stream.exhausted and self.body_stream.read(_CHUNK):
                        pass  # an unread body would be taken for the next request on this connection
                    break
            else:
                raise HubError(404, None, f"Sorry, we can't find the page you are looking for: {url.path}")
        except HubError as error:
            self._send_error(error)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as error:  # a bug here must not kill the connection silently
            logger.exception("loopback hub: %s %s failed", method, url.path)
            self._send_error(HubError(500, None, f"Internal error: {type(error).__name__}: {error}"))

    def _body(self) -> bytes:
        return self.body_stream.read()

    def _json_body(self) -> dict:
        raw = self._body()
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            raise HubError(400, None, "Request body is not valid JSON.") from None
        if not isinstance(data, dict):
            raise HubError(400, None, "Request body must be a JSON object.")
        return data

    def _send(
        self,
        status: int,
        body: bytes = b"",
        content_type: str = "application/json",
        headers: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _send_json(self, payload, status: int = 200, headers: Optional[Mapping[str, str]] = None) -> None:
        self._send(status, json.dumps(payload).encode(), headers=headers)

    def _send_error(self, error: HubError) -> None:
        # An unread request body would be taken for the next request on this connection.
        if not self.body_stream.exhausted:
            self.close_connection = True
        # Header values must be one latin-1 line.
        headers = {"X-Error-Message": " ".join(error.message.split()).encode("ascii", "backslashreplace").decode()}
        if error.code:
            headers["X-Error-Code"] = error.code
        headers.update(error.headers)
        self._send_json({"error": error.message}, status=error.status, headers=headers)

    # ------------------------------------------------------------- auth & repos
    def _authenticate(self) -> Optional[str]:
        header = self.headers.get("Authorization")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        user = self.hub.user_for_token(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise HubError(401, None, _INVALID_CREDENTIALS)
        return user

    def _repo(self, plural_type: Optional[str], ns: str, name: str, write: bool = False) -> Repo:
        """The repository `ns/name` if this caller may read it (and write to it, with `write=True`).

        `plural_type` is "models", "datasets" or "spaces" as in API routes; file routes only prefix
        "datasets/" or "spaces/", so None means a model.
        """
        repo_type = _PLURAL_TO_TYPE[plural_type or "models"]
        repo_id = f"{ns}/{name}"
        repo = self.store.get_repo(repo_type, repo_id)
        if repo is None or (repo.private and not self.hub.may_access(self.user, repo.namespace)):
            error = repo_not_found(repo_id)
            if self.user is None:
                error.status = 401  # what the Hub answers anonymous callers, with the same error code
            raise error
        if write and not self.hub.may_access(self.user, repo.namespace):
            if self.user is None:
                raise HubError(401, None, "You must be authenticated to write to this repository.")
            raise HubError(403, None, f"You don't have the rights to write to {repo_id}.")
        return repo

    def _repo_url(self, repo: Repo) -> str:
        return f"{self.base_url}/{_URL_PREFIX[repo.repo_type]}{repo.repo_id}"

    # ----------------------------------------------------------------- account
    def whoami(self):
        if self.user is None:
            raise HubError(401, None, _INVALID_CREDENTIALS)
        orgs = self.hub.orgs_of(self.user)
        self._send_json(
            {
                "type": "user",
                "id": hashlib.sha1(self.user.encode()).hexdigest()[:24],
                "name": self.user,
                "fullname": self.user,
                "email": None,
                "emailVerified": False,
                "isPro": False,
                "canPay": False,
                "avatarUrl": "",
                "orgs": [{"type": "org", "name": org, "fullname": org, "roleInOrg": "write"} for org in orgs],
                "auth": {
                    "type": "access_token",
                    "accessToken": {"displayName": "loopback", "role": "write", "createdAt": utc_timestamp(0)},
                },
            }
        )

    # ------------------------------------------------------------ repo admin
    def create_repo(self):
        payload = self._json_body()
        if self.user is None:
            raise HubError(401, None, "You must be authenticated to create a repository.")
        repo_type = payload.get("type") or "model"
        namespace = payload.get("organization") or self.user
        repo_id = f"{namespace}/{payload.get('name', '')}"
        validate_repo_id(repo_id)
        if not self.hub.may_access(self.user, namespace):
            raise HubError(403, None, f"You don't have the rights to create a {repo_type} under {namespace!r}.")
        private = payload.get("visibility") == "private" or payload.get("private") is True
        existing = self.store.get_repo(repo_type, repo_id)
        if existing is not None:
            # `create_repo(exist_ok=True)` accepts the 409 and then reads the url from its body.
            message = f"You already created this {repo_type} repo"
            self._send_json(
                {"error": message, "url": self._repo_url(existing)}, status=409, headers={"X-Error-Message": message}
            )
            return
        repo = self.store.create_repo(repo_type, repo_id, private=private, owner=self.user)
        repo_key = hashlib.sha1(repo_id.encode()).hexdigest()[:24]
        self._send_json({"url": self._repo_url(repo), "name": repo_id, "id": repo_key})

    def delete_repo(self):
        payload = self._json_body()
        namespace = payload.get("organization") or self.user or ""
        repo = self._repo(f"{payload.get('type') or 'model'}s", namespace, payload.get("name", ""), write=True)
        self.store.delete_repo(repo)
        self._send_json({})

    def update_settings(self, plural_type, ns, name):
        payload = self._json_body()
        repo = self._repo(plural_type, ns, name, write=True)
        if "visibility" in payload:
            self.store.set_private(repo, payload["visibility"] == "private")
        elif "private" in payload:
            self.store.set_private(repo, bool(payload["private"]))
        self._send_json({"private": repo.private})

    def validate_yaml(self):
        import yaml

        payload = self._json_body()
        block, _ = _split_front_matter(str(payload.get("content", "")))
        errors = []
        if block is not None:
            try:
                metadata = yaml.safe_load(block)
                if metadata is not None and not isinstance(metadata, dict):
                    errors.append({"message": "The metadata block must be a YAML mapping."})
            except yaml.YAMLError as error:
                errors.append({"message": f"Invalid YAML in the metadata block: {error}"})
        self._send_json({"errors": errors, "warnings": []}, status=400 if errors else 200)

    def auth_check(self, plural_type, ns, name):
        self._repo(plural_type, ns, name)
        self._send_json({})

    # ----------------------------------------------------------- read: info
    def repo_info(self, plural_type, ns, name, rev=None):
        repo = self._repo(plural_type, ns, name)
        self._send_json(self._info_payload(repo, repo.resolve(rev or DEFAULT_BRANCH)))

    def list_repos(self, plural_type):
        """`list_models` / `list_datasets`: filters `search`, `author` and `filter` (tags); no sorting."""
        repo_type = _PLURAL_TO_TYPE[plural_type]
        search = (self.query.get("search") or [""])[-1].lower()
        author = (self.query.get("author") or [None])[-1]
        wanted_tags = set(self.query.get("filter") or [])
        limit = int((self.query.get("limit") or [0])[-1] or 0)
        full = _truthy(self.query.get("full"))
        items = []
        for repo in sorted(self.store.list_repos(), key=lambda r: r.repo_id):
            if repo.repo_type != repo_type or search not in repo.repo_id.lower():
                continue
            if author and repo.namespace != author:
                continue
            if repo.private and not self.hub.may_access(self.user, repo.namespace):
                continue
            head = repo.head()
            if head is None:
                continue
            info = self._info_payload(repo, head, siblings=full)
            if wanted_tags and not wanted_tags <= set(info["tags"]):
                continue
            items.append(info)
        self._send_json(items[:limit] if limit else items)

    def _info_payload(self, repo: Repo, commit: Commit, siblings: bool = True) -> dict:
        card = None
        if "README.md" in commit.tree:
            card = parse_card_metadata(self.store.read_bytes(commit.tree["README.md"]).decode("utf-8", "replace"))
        tags = [str(tag) for tag in (card or {}).get("tags") or [] if isinstance(tag, (str, int))]
        info = {
            "_id": hashlib.sha1(f"{repo.repo_type}/{repo.repo_id}".encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "author": repo.namespace,
            "sha": commit.id,
            "lastModified": commit.date,
            "createdAt": repo.created_at,
            "private": repo.private,
            "gated": False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": tags,
            "usedStorage": sum(entry.size for entry in commit.tree.values()),
        }
        if siblings:
            info["siblings"] = [self._sibling(path, entry) for path, entry in sorted(commit.tree.items())]
        if card is not None:
            info["cardData"] = card
        if repo.repo_type == "model":
            info["modelId"] = repo.repo_id
            if card and card.get("library_name"):
                info["library_name"] = card["library_name"]
                tags.insert(0, str(card["library_name"]))
            if card and card.get("pipeline_tag"):
                info["pipeline_tag"] = card["pipeline_tag"]
        elif repo.repo_type == "space":
            info["sdk"] = (card or {}).get("sdk", "static")
        return info

    @staticmethod
    def _sibling(path: str, entry: FileEntry) -> dict:
        sibling = {"rfilename": path, "size": entry.size, "blobId": entry.git_oid}
        if entry.is_lfs:
            sibling["lfs"] = {"size": entry.size, "sha256": entry.lfs_sha256, "pointerSize": entry.pointer_size}
        return sibling

    def _tree_item(self, repo: Repo, commit: Commit, path: str, expand: bool) -> dict:
        entry = commit.tree.get(path)
        if entry is not None:
            item = {"type": "file", "oid": entry.git_oid, "size": entry.size, "path": path}
            if entry.is_lfs:
                item["lfs"] = {"oid": entry.lfs_sha256, "size": entry.size, "pointerSize": entry.pointer_size}
        else:
            item = {"type": "directory", "oid": commit.folder_id(path), "size": 0, "path": path}
        if expand:
            last = repo.last_commit_touching(commit, path)
            item["lastCommit"] = {"id": last.id, "title": last.title, "date": last.date}
        return item

    def tree(self, plural_type, ns, name, rev, path=None):
        repo = self._repo(plural_type, ns, name)
        commit = repo.resolve(rev)
        folder = (path or "").strip("/")
        recursive = _truthy(self.query.get("recursive"))
        expand = _truthy(self.query.get("expand"))
        prefix = folder + "/" if folder else ""
        if folder and not any(p.startswith(prefix) for p in commit.tree):
            raise HubError(404, "EntryNotFound", f"{folder} does not exist on {rev}")
        candidates = commit.directories() + sorted(commit.tree)
        listed = []
        for candidate in candidates:
            if not candidate.startswith(prefix):
                continue
            if recursive or "/" not in candidate[len(prefix) :]:
                listed.append(candidate)
        # Folders first, then files, as the Hub lists them.
        listed.sort(key=lambda p: (p in commit.tree, p))
        self._send_json([self._tree_item(repo, commit, p, expand) for p in listed])

    def paths_info(self, plural_type, ns, name, rev):
        repo = self._repo(plural_type, ns, name)
        commit = repo.resolve(rev)
        raw = self._body()
        if self.headers.get("Content-Type", "").startswith("application/json"):
            payload = json.loads(raw or b"{}")
            paths, expand = payload.get("paths", []), bool(payload.get("expand"))
        else:
            form = parse_qs(raw.decode(), keep_blank_values=True)
            paths, expand = form.get("paths", []), _truthy(form.get("expand"))
        folders = set(commit.directories())
        items = []
        for path in dict.fromkeys(p.strip("/") for p in paths):
            if path in commit.tree or path in folders:
                items.append(self._tree_item(repo, commit, path, expand))
        self._send_json(items)

    def refs(self, plural_type, ns, name):
        repo = self._repo(plural_type, ns, name)
        payload = {
            "branches": [
                {"name": branch, "ref": f"refs/heads/{branch}", "targetCommit": commit_id}
                for branch, commit_id in sorted(repo.branches.items())
            ],
            "tags": [
                {"name": tag, "ref": f"refs/tags/{tag}", "targetCommit": commit_id}
                for tag, commit_id in sorted(repo.tags.items())
            ],
            "converts": [],
        }
        if _truthy(self.query.get("include_prs")):
            payload["pullRequests"] = []
        self._send_json(payload)

    def commits(self, plural_type, ns, name, rev):
        repo = self._repo(plural_type, ns, name)
        history = [
            {"id": c.id, "title": c.title, "message": c.message, "authors": [{"user": c.author}], "date": c.date}
            for c in repo.history(repo.resolve(rev))
        ]
        self._send_json(history)

    # --------------------------------------------------------- read: files
    def resolve(self, ns, name, rev, path, prefix=None):
        repo = self._repo(prefix, ns, name)
        commit = repo.resolve(rev)
        entry = commit.tree.get(path)
        if entry is None:
            # X-Repo-Commit lets clients cache the absence (`.no_exist/<commit>/<path>`).
            raise HubError(404, "EntryNotFound", f"Entry not found: {path}", headers={"X-Repo-Commit": commit.id})
        etag = f'"{entry.etag}"'
        headers = {
            "X-Repo-Commit": commit.id,
            "ETag": etag,
            "Accept-Ranges": "bytes",
            "Content-Disposition": f"inline; filename*=UTF-8''{quote(path.rsplit('/', 1)[-1])}",
        }
        if entry.is_lfs:
            headers["X-Linked-Etag"] = etag
            headers["X-Linked-Size"] = str(entry.size)
        start, end = 0, entry.size - 1
        status = 200
        requested = self._parse_range(self.headers.get("Range"), entry.size)
        if requested is not None:
            if requested == "unsatisfiable":
                self._send(416, headers={"Content-Range": f"bytes */{entry.size}"})
                return
            start, end = requested
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{entry.size}"
        length = max(0, end - start + 1)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command == "HEAD" or length == 0:
            return
        with open(self.store.object_path(entry), "rb") as handle:
            handle.seek(start)
            remaining = length
            while remaining:
                block = handle.read(min(_CHUNK, remaining))
                if not block:
                    break
                self.wfile.write(block)
                remaining -= len(block)

    @staticmethod
    def _parse_range(header: Optional[str], size: int):
        """(start, end) inclusive for a single `bytes=` range, "unsatisfiable", or None to send everything."""
        if not header or not header.startswith("bytes=") or "," in header:
            return None
        first, _, last = header[len("bytes=") :].strip().partition("-")
        try:
            if first == "":  # suffix range: the last N bytes
                count = int(last)
                return (max(0, size - count), size - 1) if count else "unsatisfiable"
            start = int(first)
            end = int(last) if last else size - 1
        except ValueError:
            return None
        if start >= size and size > 0:
            return "unsatisfiable"
        return start, min(end, size - 1)

    # --------------------------------------------------------------- writes
    def preupload(self, plural_type, ns, name, rev):
        repo = self._repo(plural_type, ns, name, write=True)
        payload = self._json_body()
        try:
            head = repo.resolve(rev)
        except HubError:
            head = repo.head()
        files = []
        for item in payload.get("files", []):
            path = validate_path_in_repo(str(item.get("path", "")))
            sample = base64.b64decode(item.get("sample") or "")
            mode = self.store.upload_mode(repo, rev, path, int(item.get("size") or 0), sample)
            existing = head.tree.get(path) if head else None
            # The remote oid lets the client skip unchanged files: it compares it with the sha256 of
            # an LFS file, or the git blob id of a regular one.
            oid = None
            if existing is not None and existing.is_lfs == (mode == "lfs"):
                oid = existing.lfs_sha256 or existing.git_oid
            files.append({"path": path, "uploadMode": mode, "shouldIgnore": False, "oid": oid})
        self._send_json({"files": files, "commitOid": head.id if head else None})

    def commit(self, plural_type, ns, name, rev):
        repo = self._repo(plural_type, ns, name, write=True)
        if _truthy(self.query.get("create_pr")):
            raise HubError(400, None, "The loopback Hub does not support pull requests (create_pr).")
        header: dict = {}
        additions: Dict[str, FileEntry] = {}
        deletions: List[str] = []
        deleted_folders: List[str] = []
        for line in self._body().splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            key, value = item.get("key"), item.get("value") or {}
            if key == "header":
                header = value
            elif key == "file":
                if value.get("encoding", "base64") != "base64":
                    raise HubError(400, None, f"Unsupported encoding {value.get('encoding')!r}.")
                additions[value["path"]] = self.store.add_bytes(base64.b64decode(value.get("content", "")))
            elif key == "lfsFile":
                if value.get("algo", "sha256") != "sha256":
                    raise HubError(400, None, "LFS files must be addressed by sha256.")
                entry = self.store.lfs_entry(value["oid"])
                if value.get("size") is not None and int(value["size"]) != entry.size:
                    raise HubError(400, None, f"Size mismatch for LFS file {value['path']}.")
                additions[value["path"]] = entry
            elif key == "deletedFile":
                deletions.append(value["path"])
            elif key == "deletedFolder":
                deleted_folders.append(value["path"])
            else:
                raise HubError(400, None, f"Unknown commit operation {key!r}.")
        commit = self.store.commit(
            repo,
            rev,
            additions,
            deletions=deletions,
            deleted_folders=deleted_folders,
            title=header.get("summary") or "Upload files",
            message=header.get("description") or "",
            author=self.user,
            parent_commit=header.get("parentCommit"),
        )
        self._send_json(
            {
                "commitUrl": f"{self._repo_url(repo)}/commit/{commit.id}",
                "commitOid": commit.id,
                "pullRequestUrl": None,
                "success": True,
            }
        )

    def create_branch(self, plural_type, ns, name, branch):
        repo = self._repo(plural_type, ns, name, write=True)
        payload = self._json_body()
        self.store.create_branch(repo, branch, payload.get("startingPoint"))
        self._send_json({})

    def delete_branch(self, plural_type, ns, name, branch):
        self.store.delete_branch(self._repo(plural_type, ns, name, write=True), branch)
        self._send_json({})

    def create_tag(self, plural_type, ns, name, rev):
        repo = self._repo(plural_type, ns, name, write=True)
        payload = self._json_body()
        if not payload.get("tag"):
            raise HubError(400, None, "Missing tag name.")
        self.store.create_tag(repo, payload["tag"], rev)
        self._send_json({})

    def delete_tag(self, plural_type, ns, name, rev):
        self.store.delete_tag(self._repo(plural_type, ns, name, write=True), rev)
        self._send_json({})

    # ------------------------------------------------------------------ LFS
    def lfs_batch(self, ns, name, prefix=None):
        self._repo(prefix, ns, name, write=True)  # access check
        payload = self._json_body()
        if payload.get("operation") != "upload":
            raise HubError(400, None, "The loopback Hub serves LFS downloads through /resolve only.")
        transfers = payload.get("transfers") or ["basic"]
        if "basic" not in transfers:
            raise HubError(422, None, "Only the 'basic' LFS transfer is supported (set HF_HUB_DISABLE_XET=1).")
        objects = []
        for obj in payload.get("objects", []):
            oid, size = str(obj.get("oid", "")), int(obj.get("size", 0))
            if not re.fullmatch(r"[0-9a-f]{64}", oid):
                objects.append({"oid": oid, "size": size, "error": {"code": 422, "message": "Invalid sha256 oid."}})
                continue
            answer = {"oid": oid, "size": size}
            if not self.store.has_lfs_object(oid, size):
                ticket = self.hub.new_upload_ticket(oid, size)
                answer["authenticated"] = True
                answer["actions"] = {"upload": {"href": f"{self.base_url}/__lfs__/upload/{ticket}", "expires_in": 3600}}
            objects.append(answer)
        body = json.dumps({"transfer": "basic", "objects": objects, "hash_algo": "sha256"}).encode()
        self._send(200, body, content_type="application/vnd.git-lfs+json")

    def xet_token(self, plural_type, ns, name, kind, rev):
        self._repo(plural_type, ns, name, write=(kind == "write"))
        raise HubError(
            501,
            None,
            "The loopback Hub does not speak the xet protocol: set HF_HUB_DISABLE_XET=1 "
            "before huggingface_hub is imported (see tokswap.testing.hub_client_env).",
        )

    def lfs_upload(self, ticket):
        oid, size = self.hub.take_upload_ticket(ticket)
        self.store.add_lfs_stream(self.body_stream, size, oid)
        if self.body_stream.read(1):  # also consumes the end of a chunked body
            raise HubError(400, None, f"Upload is larger than the {size} bytes announced.")
        self.hub.forget_upload_ticket(ticket)
        self._send(200, b"")


def _r(pattern: str) -> re.Pattern[str]:
    return re.compile(
        pattern.replace("{TYPE}", r"(?P<plural_type>models|datasets|spaces)")
        .replace("{REPO}", r"(?P<ns>[^/]+)/(?P<name>[^/]+)")
        .replace("{PREFIX}", r"(?:(?P<prefix>datasets|spaces)/)?")
    )


# (HTTP methods, path pattern, handler). The first match wins; groups are URL-unquoted.
ROUTES: Sequence[Tuple[Tuple[str, ...], re.Pattern[str], Callable]] = (
    (("GET",), _r(r"/api/whoami-v2"), HubRequestHandler.whoami),
    (("POST",), _r(r"/api/repos/create"), HubRequestHandler.create_repo),
    (("DELETE",), _r(r"/api/repos/delete"), HubRequestHandler.delete_repo),
    (("POST",), _r(r"/api/validate-yaml"), HubRequestHandler.validate_yaml),
    (("GET",), _r(r"/api/{TYPE}"), HubRequestHandler.list_repos),
    (("GET",), _r(r"/api/{TYPE}/{REPO}"), HubRequestHandler.repo_info),
    (("GET",), _r(r"/api/{TYPE}/{REPO}/revision/(?P<rev>[^/]+)"), HubRequestHandler.repo_info),
    (("PUT",), _r(r"/api/{TYPE}/{REPO}/settings"), HubRequestHandler.update_settings),
    (("GET",), _r(r"/api/{TYPE}/{REPO}/auth-check"), HubRequestHandler.auth_check),
    (("GET",), _r(r"/api/{TYPE}/{REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?"), HubRequestHandler.tree),
    (("POST",), _r(r"/api/{TYPE}/{REPO}/paths-info/(?P<rev>[^/]+)"), HubRequestHandler.paths_info),
    (("GET",), _r(r"/api/{TYPE}/{REPO}/refs"), HubRequestHandler.refs),
    (("GET",), _r(r"/api/{TYPE}/{REPO}/commits/(?P<rev>[^/]+)"), HubRequestHandler.commits),
    (("POST",), _r(r"/api/{TYPE}/{REPO}/preupload/(?P<rev>[^/]+)"), HubRequestHandler.preupload),
    (("POST",), _r(r"/api/{TYPE}/{REPO}/commit/(?P<rev>[^/]+)"), HubRequestHandler.commit),
    (("POST",), _r(r"/api/{TYPE}/{REPO}/branch/(?P<branch>[^/]+)"), HubRequestHandler.create_branch),
    (("DELETE",), _r(r"/api/{TYPE}/{REPO}/branch/(?P<branch>[^/]+)"), HubRequestHandler.delete_branch),
    (("POST",), _r(r"/api/{TYPE}/{REPO}/tag/(?P<rev>[^/]+)"), HubRequestHandler.create_tag),
    (("DELETE",), _r(r"/api/{TYPE}/{REPO}/tag/(?P<rev>[^/]+)"), HubRequestHandler.delete_tag),
    (("GET",), _r(r"/api/{TYPE}/{REPO}/xet-(?P<kind>read|write)-token/(?P<rev>[^/]+)"), HubRequestHandler.xet_token),
    (("POST",), _r(r"/{PREFIX}{REPO}\.git/info/lfs/objects/batch"), HubRequestHandler.lfs_batch),
    (("PUT",), _r(r"/__lfs__/upload/(?P<ticket>[A-Za-z0-9_-]+)"), HubRequestHandler.lfs_upload),
    (("GET", "HEAD"), _r(r"/{PREFIX}{REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)"), HubRequestHandler.resolve),
)


class LoopbackHub:
    """A Hub server on 127.0.0.1 for tests, notebooks and bench scripts.

    Args:
        port (`int`, *optional*, defaults to 0):
            Port to listen on; 0 picks a free one (read it back from `.port` after `start()`).
        storage_dir (`str` or `Path`, *optional*):
            Where repositories and file contents live. Reused across restarts when given; a temporary
            folder removed by `stop()` otherwise.
        tokens (`dict`, *optional*):
            `{token: username}` of the accounts the server knows.
        orgs (`dict`, *optional*):
            `{username: [organisation, ...]}`. `None` (the default) makes every user a member of every
            organisation.
        host (`str`, *optional*, defaults to "127.0.0.1"):
            Interface to bind.

    Example:
        ```python
        with LoopbackHub(tokens={"hf_test": "alice"}) as hub:
            hub.seed_folder("alice/tiny-model", "./tiny-model")
            print(hub.endpoint)
        ```
    """

    def __init__(
        self,
        port: int = 0,
        storage_dir=None,
        tokens: Optional[Mapping[str, str]] = None,
        orgs: Optional[Mapping[str, Iterable[str]]] = None,
        host: str = "127.0.0.1",
    ):
        self.host = host
        self._requested_port = int(port)
        self._tokens = dict(tokens or {})
        self._orgs = None if orgs is None else {user: set(names) for user, names in orgs.items()}
        self._temp_dir = None if storage_dir is not None else tempfile.mkdtemp(prefix="tokswap-loopback-hub-")
        self.storage_dir = Path(storage_dir if storage_dir is not None else self._temp_dir)
        if self._temp_dir is not None:  # removed by stop(), or at exit if stop() is never called
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._temp_dir, ignore_errors=True)
        self.store = HubStore(self.storage_dir)
        self._tickets: Dict[str, Tuple[str, int]] = {}
        self._tickets_lock = threading.Lock()
        self._server: Optional[_HubHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    def __repr__(self) -> str:  # never shows tokens
        state = self.endpoint if self._server else "stopped"
        return f"LoopbackHub({state}, users={sorted(set(self._tokens.values()))})"

    # -------------------------------------------------------------- lifecycle
    def start(self) -> LoopbackHub:
        """Bind the port and serve from a background thread; returns `self`."""
        if self._server is not None:
            return self
        self._server = _HubHTTPServer((self.host, self._requested_port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="loopback-hub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving. A temporary storage folder is deleted; a `storage_dir` you passed is kept."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)
            self._server, self._thread = None, None
        if self._temp_dir is not None:
            self._cleanup()
            self._temp_dir = None

    def __enter__(self) -> LoopbackHub:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("The loopback Hub is not running; call start() first.")
        return self._server.server_address[1]

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -------------------------------------------------------------- accounts
    def add_token(self, token: str, username: str) -> None:
        """Let `token` authenticate as `username` (usable while the server runs)."""
        self._tokens[token] = username

    def user_for_token(self, token: str) -> Optional[str]:
        return self._tokens.get(token)

    def orgs_of(self, user: str) -> List[str]:
        if self._orgs is None:
            return sorted({repo.namespace for repo in self.store.list_repos()} - {user})
        return sorted(self._orgs.get(user, ()))

    def may_access(self, user: Optional[str], namespace: str) -> bool:
        """Whether `user` may read private repositories of, and write to, `namespace`."""
        if user is None:
            return False
        return namespace == user or self._orgs is None or namespace in self._orgs.get(user, ())

    # --------------------------------------------------------------- uploads
    def new_upload_ticket(self, oid: str, size: int) -> str:
        """A one-off secret upload URL path: LFS PUTs carry no Authorization header, as with S3 URLs."""
        ticket = secrets.token_urlsafe(24)
        with self._tickets_lock:
            self._tickets[ticket] = (oid, size)
        return ticket

    def take_upload_ticket(self, ticket: str) -> Tuple[str, int]:
        with self._tickets_lock:
            if ticket not in self._tickets:
                raise HubError(403, None, "Unknown or expired upload URL.")
            return self._tickets[ticket]

    def forget_upload_ticket(self, ticket: str) -> None:
        with self._tickets_lock:
            self._tickets.pop(ticket, None)

    # ---------------------------------------------------------------- seeding
    def seed_folder(
        self,
        repo_id: str,
        folder,
        repo_type: str = "model",
        private: bool = False,
        commit_message: Optional[str] = None,
        revision: str = DEFAULT_BRANCH,
        ignore_patterns: Sequence[str] = (),
        author: str = "loopback-seed",
    ) -> str:
        """Publish a local folder as `repo_id` directly in the store (no HTTP), like `upload_folder`.

        The repository is created when missing. Files matching `.gitattributes` LFS patterns, binary
        files and files of 10 MB or more are stored as LFS objects (hard-linked, not copied, when
        possible). Seeding the same content again makes no new commit.

        Returns:
            `str`: the commit id `revision` points to afterwards.
        """
        import fnmatch

        folder = Path(folder)
        if not folder.is_dir():
            raise FileNotFoundError(f"Cannot seed {repo_id}: {folder} is not a folder.")
        repo = self.store.get_repo(repo_type, repo_id) or self.store.create_repo(repo_type, repo_id, private=private)
        if repo.private != bool(private):
            self.store.set_private(repo, private)
        files = []
        for root, dirs, names in os.walk(folder, followlinks=True):
            dirs[:] = sorted(d for d in dirs if d not in (".git", ".cache"))
            for name in sorted(names):
                local = Path(root, name)
                rel = local.relative_to(folder).as_posix()
                if not any(fnmatch.fnmatch(rel, pattern) for pattern in ignore_patterns):
                    files.append((rel, local))
        additions = {}
        for rel, local in files:
            with open(local, "rb") as handle:
                sample = handle.read(512)
            mode = self.store.upload_mode(repo, revision, rel, local.stat().st_size, sample)
            additions[rel] = self.store.add_file(local, lfs=(mode == "lfs"))
        head = repo.head(revision)
        if head is not None and all(head.tree.get(path) == entry for path, entry in additions.items()):
            return head.id
        commit = self.store.commit(
            repo,
            revision,
            additions,
            title=commit_message or f"Upload {folder.name}",
            author=author,
            allow_new_branch=True,
        )
        return commit.id

    def seed_files(
        self,
        repo_id: str,
        files: Mapping[str, bytes],
        repo_type: str = "model",
        private: bool = False,
        commit_message: str = "Upload files",
        revision: str = DEFAULT_BRANCH,
    ) -> str:
        """Publish in-memory files (`{path_in_repo: content}`) as one commit; returns its id."""
        repo = self.store.get_repo(repo_type, repo_id) or self.store.create_repo(repo_type, repo_id, private=private)
        additions = {}
        for path, content in files.items():
            mode = self.store.upload_mode(repo, revision, path, len(content), content[:512])
            additions[path] = self.store.add_bytes(content, lfs=(mode == "lfs"))
        return self.store.commit(
            repo, revision, additions, title=commit_message, author="loopback-seed", allow_new_branch=True
        ).id


def hub_client_env(endpoint: str, hf_home, token: Optional[str] = None) -> Dict[str, str]:
    """Environment variables that point huggingface_hub / transformers / datasets at `endpoint`.

    They are read when those libraries are imported, so apply them (`os.environ.update(...)`, or the
    `env=` of a subprocess) before importing them. `HF_TOKEN` is only included when `token` is given.
    """
    hf_home = str(hf_home)
    env = {
        "HF_ENDPOINT": endpoint.rstrip("/"),
        "HF_HOME": hf_home,
        "HF_HUB_CACHE": os.path.join(hf_home, "hub"),
        "HF_ASSETS_CACHE": os.path.join(hf_home, "assets"),
        "HF_XET_CACHE": os.path.join(hf_home, "xet"),
        "HF_DATASETS_CACHE": os.path.join(hf_home, "datasets"),
        "HF_TOKEN_PATH": os.path.join(hf_home, "token"),
        # huggingface_hub 2.x would upload through the xet protocol, which the loopback Hub does not speak.
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_UPDATE_CHECK": "1",
        "HF_HUB_DISABLE_IMPLICIT_TOKEN": "0",
        "HF_HUB_OFFLINE": "0",
        "HF_DATASETS_OFFLINE": "0",
        "TRANSFORMERS_OFFLINE": "0",
        "HF_UPDATE_DOWNLOAD_COUNTS": "0",
    }
    if token is not None:
        env["HF_TOKEN"] = token
    return env


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tokswap.testing.hub_server",
        description="Serve the Hugging Face Hub protocol on loopback (for tests, notebooks and benchmarks).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n"
        "  python -m tokswap.testing.hub_server --port 8765 --storage /tmp/hub \\\n"
        "      --seed HuggingFaceTB/SmolLM2-135M-Instruct=/path/to/model_folder\n"
        "  HF_ENDPOINT=http://127.0.0.1:8765 HF_HUB_DISABLE_XET=1 HF_TOKEN=... python your_script.py",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed at start).")
    parser.add_argument("--storage", default=None, help="Folder to keep repositories in (temporary if omitted).")
    parser.add_argument(
        "--token",
        default=os.environ.get("HF_TOKEN"),
        help="Token accepted for --user (defaults to $HF_TOKEN; never printed).",
    )
    parser.add_argument("--user", default="tokswap-tester", help="User name the token authenticates as.")
    parser.add_argument(
        "--seed",
        action="append",
        default=[],
        metavar="REPO_ID=FOLDER",
        help="Publish a local folder as a model repo before serving (repeatable).",
    )
    parser.add_argument(
        "--seed-dataset",
        action="append",
        default=[],
        metavar="REPO_ID=FOLDER",
        help="Publish a local folder as a dataset repo before serving (repeatable).",
    )
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="[loopback-hub] %(message)s")
    hub = LoopbackHub(
        port=args.port, storage_dir=args.storage, host=args.host, tokens={args.token: args.user} if args.token else {}
    )
    for repo_type, specs in (("model", args.seed), ("dataset", args.seed_dataset)):
        for spec in specs:
            repo_id, sep, folder = spec.partition("=")
            if not sep:
                parser.error(f"--seed expects REPO_ID=FOLDER, got {spec!r}")
            sha = hub.seed_folder(repo_id, folder, repo_type=repo_type)
            logger.info("seeded %s %s at %s", repo_type, repo_id, sha[:12])
    hub.start()
    print(f"Serving the Hub protocol on {hub.endpoint} (storage: {hub.storage_dir})", flush=True)
    if not args.token:
        print("No token configured: repositories are read-only.", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
