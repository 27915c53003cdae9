"""The Hub side of publishing: the token (`token=`, else HF_TOKEN, else the login cache), the
endpoint, the access check before anything is written (`whoami`), the transfer protocol per
endpoint, and a Hub refusal as a PublishError saying what to do (`publishing.publish` uses it).

The token is sent to the Hub and written nowhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

TOKEN_HELP = (
    "set HF_TOKEN, run `hf auth login`, or pass token=; create a token with write access at "
    "{endpoint}/settings/tokens"
)


class PublishError(RuntimeError):
    """Publishing was refused or failed; the message says why and what to do."""


def hub_token(token: str | None = None) -> str:
    """The token to publish with: `token`, else HF_TOKEN, else the login cache."""
    from huggingface_hub import constants, get_token

    found = (token or "").strip() or get_token()
    if not found:
        raise PublishError(
            "No Hugging Face token: " + TOKEN_HELP.format(endpoint=constants.ENDPOINT) + "."
        )
    return found


def hub_endpoint(endpoint: str | None = None) -> str:
    from huggingface_hub import constants

    return (endpoint or constants.ENDPOINT).rstrip("/")


@contextlib.contextmanager
def transfer_for(endpoint: str) -> Iterator[None]:
    """Xet for the Hub itself; plain LFS for another endpoint, which may not offer Xet
    (huggingface_hub tries Xet whenever hf_xet is installed, and reads this switch per call)."""
    from huggingface_hub import constants

    own = endpoint == constants._HF_DEFAULT_ENDPOINT
    before = constants.HF_HUB_DISABLE_XET
    constants.HF_HUB_DISABLE_XET = before or not own
    try:
        yield
    finally:
        constants.HF_HUB_DISABLE_XET = before


def http_error(e: Exception, repo: str, endpoint: str, user: str | None) -> PublishError:
    """A Hub refusal as a PublishError saying what to do."""
    response = getattr(e, "response", None)
    status = getattr(response, "status_code", None)
    said = (getattr(e, "server_message", None) or str(e)).strip().splitlines()[0]
    who = f" (the token is {user}'s)" if user else ""
    if status == 401:
        return PublishError(
            f"The Hub at {endpoint} refused the token (401 Unauthorized: {said}): it is invalid "
            f"or expired. To use another, {TOKEN_HELP.format(endpoint=endpoint)}."
        )
    if status == 403:
        return PublishError(
            f"The Hub at {endpoint} does not let this token write to {repo}{who} (403 Forbidden: "
            f"{said}). Use a token with write access to that namespace, or publish under your "
            "own name."
        )
    if status == 404:
        return PublishError(f"The Hub at {endpoint} has no repo {repo} (404: {said}).")
    return PublishError(f"Publishing to {repo} at {endpoint} failed: {type(e).__name__}: {said}")


def check_access(api: Any, repo: str, endpoint: str) -> tuple[str, str]:
    """Who the token is, and the full repo id; refuses an invalid or read-only token and a
    namespace that is neither the user's nor one of their organisations'."""
    from huggingface_hub.errors import HfHubHTTPError

    try:
        me = api.whoami()
    except HfHubHTTPError as e:
        raise http_error(e, repo, endpoint, None) from None
    user = str(me.get("name") or "")
    orgs = [str(o.get("name")) for o in me.get("orgs") or [] if isinstance(o, dict)]
    namespace, _, name = repo.rpartition("/")
    namespace = namespace or user
    if namespace not in (user, *orgs):
        mine = ", ".join([user, *orgs])
        raise PublishError(
            f"{repo} belongs to {namespace}, which is not this token's user or one of its "
            f"organisations ({mine}). Publish under your own name, e.g. {user}/{name}."
        )
    role = ((me.get("auth") or {}).get("accessToken") or {}).get("role")
    if role == "read":
        raise PublishError(
            f"The token is read-only (it is {user}'s); publishing needs one with write access: "
            f"create one at {endpoint}/settings/tokens."
        )
    return user, f"{namespace}/{name}"
