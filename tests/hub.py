"""A Hugging Face hub on the loopback address, for the weights tests: the endpoints and headers
huggingface_hub's clients read, over repositories the test builds (and URL files beside them).

    hub = Hub().start()
    sha = hub.commit("org/tiny", {"config.json": b"...", "model.safetensors": b"..."})   # on main
    hub.files["ckpt.safetensors"] = b"..."      # http://127.0.0.1:<port>/files/ckpt.safetensors
    hub.change("org/tiny", "model.safetensors", b"other")   # the same commit, other content
    hub.stop()

Served: ``GET /api/models/<repo>/revision/<rev>`` (id, sha, siblings), ``HEAD``/``GET
/<repo>/resolve/<rev>/<file>`` with X-Repo-Commit, ETag (the sha256, as for LFS files) and
Content-Length, and the errors' X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound). No Xet
headers: the client downloads over plain HTTP.
"""

import hashlib
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as httpx expects of the hub

    def do_HEAD(self):  # noqa: N802 - the http.server API
        self.answer(head=True)

    def do_GET(self):  # noqa: N802
        self.answer(head=False)

    def answer(self, head):
        hub = self.server.hub
        path = unquote(urlsplit(self.path).path).lstrip("/")
        hub.requests[path] += 1
        parts = path.split("/")
        if parts[0] == "files" and len(parts) == 2:
            body = hub.files.get(parts[1])
            return self.reply(200, body, head=head) if body is not None else self.reply(404, b"not here", head=head)
        if parts[:2] == ["api", "models"] and len(parts) == 6 and parts[4] == "revision":
            repo, rev = "/".join(parts[2:4]), parts[5]
            sha, tree = hub.resolve(repo, rev)
            if tree is None:
                return self.error(sha, head)
            doc = {"id": repo, "modelId": repo, "sha": sha, "siblings": [{"rfilename": f} for f in sorted(tree)]}
            return self.reply(200, json.dumps(doc).encode(), [("Content-Type", "application/json")], head)
        if len(parts) >= 5 and parts[2] == "resolve":
            repo, rev, file = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
            sha, tree = hub.resolve(repo, rev)
            if tree is None:
                return self.error(sha, head)
            if file not in tree:
                return self.error("EntryNotFound", head)
            body = tree[file]
            return self.reply(200, body, [("X-Repo-Commit", sha), ("ETag", f'"{hashlib.sha256(body).hexdigest()}"'),
                                          ("Content-Type", "application/octet-stream")], head)
        self.reply(404, b"not here", head=head)

    def error(self, code, head):
        self.reply(404, code.encode(), [("X-Error-Code", code), ("X-Error-Message", code)], head)

    def reply(self, code, body, headers=(), head=False):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, *args):
        pass


class Hub:
    """Repositories of commits (each a full tree {file: bytes}), refs, and plain files under /files/."""

    def __init__(self):
        self.repos, self.refs, self.files, self.requests = {}, {}, {}, Counter()
        self.server = self.thread = None

    def start(self):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.hub, self.server.daemon_threads = self, True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()
        return self

    def stop(self):
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(5)
            self.server = None

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def url(self, name):
        return f"{self.endpoint}/files/{name}"

    def commit(self, repo, files, ref="main"):
        """A new commit of ``repo`` (its tree: the previous one updated with ``files``) on ``ref``; its sha."""
        commits = self.repos.setdefault(repo, {})
        tree = {**commits.get(self.refs.get((repo, ref)), {}), **files}
        sha = hashlib.sha1(repr((len(commits), sorted(tree.items()))).encode()).hexdigest()
        commits[sha] = tree
        self.refs[(repo, ref)] = sha
        return sha

    def change(self, repo, file, body, ref="main"):
        """Replace ``file`` in the commit ``ref`` points to, in place (what a lock must catch)."""
        self.repos[repo][self.refs[(repo, ref)]][file] = body

    def resolve(self, repo, rev):
        """(commit sha, its tree) of ``rev`` (a ref or a sha); (error code, None) when there is none."""
        if repo not in self.repos:
            return "RepoNotFound", None
        sha = self.refs.get((repo, rev), rev)
        tree = self.repos[repo].get(sha)
        return (sha, tree) if tree is not None else ("RevisionNotFound", None)
