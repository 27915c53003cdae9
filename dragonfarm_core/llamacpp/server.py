"""llama.cpp's own server on a GGUF, on 127.0.0.1: how the template check and the bench ask
llama.cpp what it makes of an exported file.

    with LlamaServer.start(tools, "model.gguf", threads=2) as server:
        text = server.apply_template(messages)        # the GGUF's own chat template
        ids = server.tokenize(text)                   # [(id, piece), ...] as llama.cpp reads it
        reply = server.complete(ids, n_predict=32)    # greedy: argmax only, no penalties

Everything goes through llama-server's documented HTTP endpoints (/health, /apply-template,
/tokenize, /completion, /props) with the standard library's urllib, so both the app side and the
torch-side check job can use it. The server listens on 127.0.0.1 only, on a free port, with a
single slot; it is stopped (its process group killed) when the block ends. Its log goes to a
file, whose tail a failure to start reports.

llama-server answers any Origin (CORS `*`) and any Host, so without a key any page the user
visits could find the port and use the model. Each server gets a fresh random API key, handed
over in its environment (LLAMA_API_KEY: a process's environment is readable only by its user,
its argv by everyone) with the allow-listed rest (`childenv`); every request here sends it, and
llama-server answers 401 to anything without it except /health.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from dragonfarm_core.llamacpp.location import SERVER, LlamaCpp
from dragonfarm_core.rundir import childenv, files

HOST = "127.0.0.1"
START_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 300.0
# Greedy decoding as transformers does it with do_sample=False: argmax only. llama-server's
# other samplers (its penalties read the GGUF's generation defaults) are switched off by name.
GREEDY = {
    "temperature": 0.0,
    "top_k": 1,
    "top_p": 1.0,
    "min_p": 0.0,
    "repeat_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "dry_multiplier": 0.0,
    "samplers": ["top_k"],
    "seed": 0,
}


class LlamaServerError(RuntimeError):
    """llama-server did not start, or answered a request with an error."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    """A running llama-server (`start` makes one); `stop()` or a `with` block ends it."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path
    gguf: Path
    api_key: str = field(default="", repr=False)
    _closed: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @classmethod
    def start(
        cls,
        tools: LlamaCpp,
        gguf: str | os.PathLike[str],
        *,
        threads: int = 2,
        ctx: int = 2048,
        slots: int = 1,
        log: str | os.PathLike[str] | None = None,
        timeout: float = START_TIMEOUT_S,
    ) -> LlamaServer:
        """Start llama-server on `gguf` and wait until it answers /health (LlamaServerError,
        with its log's tail, when it exits or does not answer within `timeout` s). `slots`
        conversations are decoded at once, sharing `ctx` tokens between them."""
        binary = tools.binary(SERVER)
        gguf = Path(gguf).resolve()
        log_path = Path(log) if log is not None else gguf.parent / f".{gguf.name}.server.log"
        port = free_port()
        api_key = secrets.token_urlsafe(32)
        env = {**childenv.child_env(), "LLAMA_API_KEY": api_key}
        argv = [str(binary), "-m", str(gguf), "--host", HOST, "--port", str(port),
                "-t", str(threads), "-tb", str(threads), "-c", str(ctx), "-np", str(slots),
                "--no-webui", "--jinja", "--no-warmup", "-ngl", "0"]  # fmt: skip
        with open(log_path, "ab") as out:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: stop() takes whatever it started
            )
        server = cls(process, port, log_path, gguf, api_key)
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise LlamaServerError(
                    f"llama-server exited with status {process.returncode} loading {gguf}. "
                    f"Last lines of its log ({log_path}):\n" + server.log_tail()
                )
            try:
                if server._get("/health", timeout=2).get("status") == "ok":
                    return server
            except (OSError, LlamaServerError, ValueError):
                pass
            if time.monotonic() > deadline:
                server.stop()
                raise LlamaServerError(
                    f"llama-server did not answer on {server.url} within {timeout:g} s. Last "
                    f"lines of its log ({log_path}):\n" + server.log_tail()
                )
            time.sleep(0.1)

    def log_tail(self, n: int = 20) -> str:
        return "\n".join(files.read_tail(self.log, n))

    def _request(self, path: str, body: dict[str, Any] | None, timeout: float) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(
            self.url + path,
            data=data,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", errors="replace")[:1000]
            raise LlamaServerError(f"llama-server {path} answered {e.code}: {detail}") from None

    def _get(self, path: str, timeout: float = REQUEST_TIMEOUT_S) -> Any:
        return self._request(path, None, timeout)

    def _post(self, path: str, body: dict[str, Any], timeout: float = REQUEST_TIMEOUT_S) -> Any:
        return self._request(path, body, timeout)

    def props(self) -> dict[str, Any]:
        """/props: the model's chat template, bos/eos, the default generation settings."""
        return dict(self._get("/props"))

    def apply_template(self, messages: list[dict[str, Any]]) -> str:
        """The conversation rendered by the GGUF's own chat template, with the generation
        prompt (as llama-server's chat endpoint renders it before tokenizing)."""
        return str(self._post("/apply-template", {"messages": messages})["prompt"])

    def tokenize(self, text: str, add_special: bool = True) -> list[tuple[int, str]]:
        """`text` as llama.cpp tokenizes a chat prompt (special tokens parsed, BOS added when
        the GGUF says so): (id, piece) pairs."""
        body = {"content": text, "add_special": add_special, "parse_special": True,
                "with_pieces": True}  # fmt: skip
        tokens = self._post("/tokenize", body)["tokens"]
        return [(int(t["id"]), str(t["piece"])) for t in tokens]

    def detokenize(self, ids: list[int]) -> str:
        return str(self._post("/detokenize", {"tokens": ids})["content"])

    def complete(self, prompt: list[int], n_predict: int, **options: Any) -> dict[str, Any]:
        """Greedy continuation of the token ids `prompt`: the reply's token ids (`tokens`; the
        end-of-generation token that stopped it is the last, as in transformers' output), the
        stop type ("eos" or "limit"), and llama.cpp's timings. `options` are more /completion
        fields (the decode bench sends ignore_eos)."""
        body = {"prompt": prompt, "n_predict": n_predict, "return_tokens": True,
                "cache_prompt": False, "stream": False, **GREEDY, **options}  # fmt: skip
        answer = dict(self._post("/completion", body))
        answer["tokens"] = [int(t) for t in answer.get("tokens") or []]
        return answer

    def stop(self) -> None:
        """End the server and whatever it started (SIGTERM, then SIGKILL)."""
        if self._closed:
            return
        self._closed = True
        from dragonfarm_core.rundir.jobs import kill_group

        if self.process.poll() is None:
            kill_group(self.process.pid, grace=5.0, alive=lambda: self.process.poll() is None)
        self.process.wait(timeout=10)

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
