"""A local HTTP server on 127.0.0.1 that serves dataset repositories the way the Hub does for
`datasets.load_dataset("owner/name")` (through huggingface_hub): the repo's info, its file tree,
and each file under /resolve/ (HEAD for metadata, GET for bytes). A repo that is not in `repos`
answers 404 with the Hub's error headers, as the Hub answers for a dataset that does not exist.

    GET  /api/datasets/{ns}/{name}[/revision/{rev}]      info: id, sha, siblings
    GET  /api/datasets/{ns}/{name}/tree/{rev}[/{dir}]    the files in a folder (404 when none)
    HEAD /datasets/{ns}/{name}/resolve/{rev}/{file}      ETag and X-Repo-Commit, or 404
    GET  /datasets/{ns}/{name}/resolve/{rev}/{file}      the bytes
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SHA = "0123456789abcdef0123456789abcdef01234567"


class FakeDatasetHub:
    def __init__(self, repos: dict[str, dict[str, bytes]]) -> None:
        self.repos = repos  # "owner/name" -> {path: bytes}
        self.requests: list[tuple[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self, head: bool) -> None:
                fake.requests.append((self.command, self.path))
                status, body, headers = fake.route(self.path.split("?")[0])
                self.send_response(status)
                for key, value in {"Content-Length": str(len(body)), **headers}.items():
                    self.send_header(key, value)
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def do_GET(self) -> None:
                self._serve(head=False)

            def do_HEAD(self) -> None:
                self._serve(head=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def __enter__(self) -> FakeDatasetHub:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def route(self, path: str) -> tuple[int, bytes, dict[str, str]]:
        missing = (404, b'{"error": "Repository not found"}',
                   {"Content-Type": "application/json", "X-Error-Code": "RepoNotFound"})  # fmt: skip
        api = path.startswith("/api/datasets/")
        rest = path.removeprefix("/api/datasets/" if api else "/datasets/").split("/")
        repo = "/".join(rest[:2])
        if repo not in self.repos:
            return missing
        files, tail = self.repos[repo], rest[2:]
        if api and (not tail or tail[0] == "revision"):
            siblings = [{"rfilename": name} for name in files]
            info = {"id": repo, "sha": SHA, "private": False, "siblings": siblings, "tags": []}
            return 200, json.dumps(info).encode(), {"Content-Type": "application/json"}
        if api and tail[0] == "tree":
            folder = "/".join(tail[2:]).strip("/")
            entries = [
                {
                    "type": "file",
                    "path": name,
                    "size": len(data),
                    "oid": hashlib.sha1(data).hexdigest(),
                }  # fmt: skip
                for name, data in files.items()
                if name.rpartition("/")[0] == folder
            ]
            if not entries:
                return 404, b'{"error": "not found"}', {"X-Error-Code": "EntryNotFound"}
            return 200, json.dumps(entries).encode(), {"Content-Type": "application/json"}
        if not api and tail[:1] == ["resolve"]:
            name = "/".join(tail[2:])
            if name not in files:
                return 404, b"", {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": SHA}
            etag = f'"{hashlib.sha1(files[name]).hexdigest()}"'
            return 200, files[name], {"ETag": etag, "X-Repo-Commit": SHA}
        return missing
