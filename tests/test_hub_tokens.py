"""HF_TOKEN belongs to HF_ENDPOINT's host: it is never sent to another host serving alignments."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tokswap import hub as tokswap_hub


@pytest.fixture()
def recording_server():
    """A local HTTP server that records each request's Authorization header and answers 404."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            seen.append(self.headers.get("Authorization"))
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD = do_POST = _answer

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()


def fetch_index(**kwargs):
    try:
        tokswap_hub.load_alignment_index(**kwargs)
    except Exception:  # the server answers 404 to everything; only what was sent matters here
        pass


@pytest.fixture()
def custom_endpoint(recording_server, monkeypatch, tmp_path):
    url, seen = recording_server
    monkeypatch.setenv("HF_TOKEN", "hf_secret_for_the_real_hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(tokswap_hub.ALIGNMENT_TOKEN_ENV, raising=False)
    monkeypatch.setenv(tokswap_hub.ALIGNMENT_ENDPOINT_ENV, url)
    return seen


def test_hf_token_is_not_sent_to_another_alignment_host(custom_endpoint):
    fetch_index()
    assert custom_endpoint, "no request reached the alignment endpoint"
    assert not any(header and "hf_secret_for_the_real_hub" in header for header in custom_endpoint)


def test_the_alignment_host_gets_its_own_token(custom_endpoint, monkeypatch):
    monkeypatch.setenv(tokswap_hub.ALIGNMENT_TOKEN_ENV, "alignment_host_token")
    fetch_index()
    assert custom_endpoint and all(header == "Bearer alignment_host_token" for header in custom_endpoint)


def test_an_explicit_token_is_sent_as_given(custom_endpoint):
    fetch_index(token="explicit_token")
    assert custom_endpoint and all(header == "Bearer explicit_token" for header in custom_endpoint)


def test_the_hub_s_own_host_keeps_the_implicit_token(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "https://huggingface.co")
    monkeypatch.setenv(tokswap_hub.ALIGNMENT_ENDPOINT_ENV, "https://huggingface.co/")
    assert tokswap_hub.alignment_token() is None  # None: huggingface_hub uses HF_TOKEN as usual
    monkeypatch.setenv(tokswap_hub.ALIGNMENT_ENDPOINT_ENV, "https://mirror.example.com")
    assert tokswap_hub.alignment_token() is False
