"""A local HTTP server on 127.0.0.1 that speaks the Hub API calls huggingface_hub makes to
create a repo and upload files (`create_repo`, `create_commit` / `upload_folder`), over plain
Git LFS (it offers no Xet), so tests drive the official client against it.

    GET  /api/whoami-v2                                 who the bearer token is (401 if unknown)
    POST /api/repos/create                              {name, organization, private} -> {url}
    GET  /api/models/{ns}/{name}[/revision/{rev}]       repo_info (404 if none)
    POST /api/validate-yaml                             the model card's metadata
    POST /api/models/{ns}/{name}/preupload/{rev}        which files go as LFS, which inline
    POST /{ns}/{name}.git/info/lfs/objects/batch        LFS batch: where to PUT each object
    PUT  /lfs/{oid}                                     the object (sha256 checked; no token)
    POST /api/models/{ns}/{name}/commit/{rev}           NDJSON: header, file, lfsFile lines

`users` maps tokens to (user, orgs, role). A user may write only under their name and orgs
(403 otherwise, as the Hub answers); `owners` pre-creates repos that belong to someone else.
Every request is recorded (method, path, headers, body); committed files land in `repos`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Files the real Hub stores through LFS: by extension (its .gitattributes), or large ones.
LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".png", ".model")
LFS_MIN_BYTES = 10 * 1024 * 1024


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class FakeHub:
    def __init__(
        self,
        users: dict[str, tuple[str, list[str], str]] | None = None,
        owners: dict[str, str] | None = None,
    ) -> None:
        self.users = users or {"hf_good": ("alice", ["acme"], "write")}
        self.repos: dict[str, dict[str, bytes]] = {}
        self.private: dict[str, bool] = {}
        self.owner: dict[str, str] = {}
        for repo, owner in (owners or {}).items():
            self.repos[repo], self.owner[repo] = {}, owner
        self.objects: dict[str, bytes] = {}
        self.requests: list[dict[str, Any]] = []
        self.commits: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self, method: str) -> None:
                body = self.read_body()
                fake.requests.append({"method": method, "path": self.path, "body": body,
                                      "headers": {k.lower(): v for k, v in self.headers.items()}})  # fmt: skip
                status, payload = fake.route(method, self.path.split("?")[0], body, self.headers)
                data = json.dumps(payload).encode() if payload is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def read_body(self) -> bytes:
                if "chunked" in (self.headers.get("Transfer-Encoding") or ""):
                    data = b""  # an LFS PUT streams the file
                    while size := int(self.rfile.readline().strip() or b"0", 16):
                        data += self.rfile.read(size)
                        self.rfile.readline()
                    self.rfile.readline()
                    return data
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def do_PUT(self) -> None:
                self._serve("PUT")

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- the routes ------------------------------------------------------------------------

    def who(self, headers: Any) -> tuple[str, list[str], str] | None:
        auth = headers.get("Authorization") or ""
        return self.users.get(auth.removeprefix("Bearer ").strip()) if auth else None

    def may_write(self, who: tuple[str, list[str], str] | None, repo: str) -> bool:
        if who is None or who[2] == "read":
            return False
        namespace = repo.split("/")[0]
        owner = self.owner.get(repo, namespace)
        return owner in (who[0], *who[1])

    def route(self, method: str, path: str, body: bytes, headers: Any) -> tuple[int, Any]:
        who = self.who(headers)
        if path == "/api/whoami-v2":
            if who is None:
                return 401, {"error": "Invalid credentials in Authorization header"}
            return 200, {"type": "user", "name": who[0], "orgs": [{"name": o} for o in who[1]],
                         "auth": {"type": "access_token",
                                  "accessToken": {"displayName": "t", "role": who[2]}}}  # fmt: skip
        if path.startswith("/lfs/") and method == "PUT":  # a pre-signed URL: no token sent
            oid = path.removeprefix("/lfs/")
            if hashlib.sha256(body).hexdigest() != oid:
                return 400, {"error": "sha256 mismatch"}
            self.objects[oid] = body
            return 200, None
        if who is None:
            return 401, {"error": "Invalid credentials in Authorization header"}
        if path == "/api/repos/create":
            spec = json.loads(body)
            repo = f"{spec.get('organization') or who[0]}/{spec['name']}"
            if repo in self.repos:
                return 409, {
                    "error": "You already created this model repo",
                    "url": f"{self.url}/{repo}",
                }
            if not self.may_write(who, repo):
                return 403, {"error": f"You don't have the rights to create a model under the "
                                      f"namespace \"{repo.split('/')[0]}\""}  # fmt: skip
            self.repos[repo], self.owner[repo] = {}, repo.split("/")[0]
            self.private[repo] = bool(spec.get("private") or spec.get("visibility") == "private")
            return 200, {"url": f"{self.url}/{repo}", "name": repo}
        if path == "/api/validate-yaml":
            return 200, {"errors": [], "warnings": []}
        if path.endswith(".git/info/lfs/objects/batch"):
            repo = path.removeprefix("/").removesuffix(".git/info/lfs/objects/batch")
            if not self.may_write(who, repo):
                return 403, {"message": "Forbidden"}
            objects = json.loads(body)["objects"]
            return 200, {"transfer": "basic", "objects": [
                {"oid": o["oid"], "size": o["size"], "authenticated": True,
                 "actions": {"upload": {"href": f"{self.url}/lfs/{o['oid']}"}}}
                for o in objects]}  # fmt: skip
        if path.startswith("/api/models/"):
            return self.model_route(method, path.removeprefix("/api/models/"), body, who)
        return 404, {"error": f"no route {method} {path}"}

    def model_route(self, method: str, rest: str, body: bytes, who: Any) -> tuple[int, Any]:
        parts = rest.split("/")
        repo, action = "/".join(parts[:2]), parts[2] if len(parts) > 2 else ""
        if repo not in self.repos:
            return 404, {"error": "Repository not found"}
        if method == "GET" and action in ("", "revision"):
            return 200, {"id": repo, "sha": "0" * 40, "private": self.private.get(repo, False),
                         "siblings": [{"rfilename": n} for n in self.repos[repo]]}  # fmt: skip
        if not self.may_write(who, repo):
            return 403, {"error": f"You don't have the rights to write to {repo}"}
        if action == "preupload":
            entries = json.loads(body)["files"]
            return 200, {"files": [
                {"path": f["path"], "shouldIgnore": False, "oid": None,
                 "uploadMode": "lfs" if f["path"].endswith(LFS_SUFFIXES) or f["size"] >= LFS_MIN_BYTES
                 else "regular"} for f in entries]}  # fmt: skip
        if action == "commit":
            lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            stored = self.repos[repo]
            for line in lines:
                value = line["value"]
                if line["key"] == "file":
                    stored[value["path"]] = base64.b64decode(value["content"])
                elif line["key"] == "lfsFile":
                    if value["oid"] not in self.objects:
                        return 400, {"error": f"LFS object {value['oid']} was never uploaded"}
                    stored[value["path"]] = self.objects[value["oid"]]
            self.commits.append({"repo": repo, "lines": lines})
            oid = hashlib.sha1(body).hexdigest()
            return 200, {"commitUrl": f"{self.url}/{repo}/commit/{oid}", "commitOid": oid,
                         "success": True}  # fmt: skip
        return 404, {"error": f"no route {method} {rest}"}
