"""Secrets: passwords, session ids, API tokens, CSRF tokens and the code-fetch claims
replicas present. The decisions here are pure functions over their inputs (the clock
and the server's secret key are arguments); argon2 does the password hashing.

- Passwords are argon2id hashes (`argon2-cffi`): slow on purpose, salted. A new one
  must be 12 characters or more and not easy to guess (`password_problem`).
- Session ids and API tokens are 32 random bytes. They are stored as SHA-256 digests:
  with that much entropy a fast hash is enough (nobody can brute-force 2**256), and a
  database leak reveals no usable credential.
- The CSRF token of a session is an HMAC of the session id under the server's key, so it
  needs no storage and cannot be forged without the key.
- A code claim is `<payload>.<signature>`: base64url JSON `{job, sha256, exp}` and an
  HMAC-SHA256 of it. A replica sends it as `Authorization: Bearer` when it fetches its
  code; it opens exactly one blob for one job until it expires.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from zxcvbn import zxcvbn
from zxcvbn.frequency_lists import FREQUENCY_LISTS

TOKEN_PREFIX = "tfk_"
"""API tokens start with this, so a leaked one is recognisable (secret scanners)."""
SESSION_COOKIE = "tfkube_session"
CSRF_HEADER = "X-CSRF-Token"
MIN_PASSWORD_LENGTH = 12
MAX_PASSWORD_LENGTH = 256
"""Long passphrases are welcome (NIST: at least 64); past this only the hash costs more."""
MIN_PASSWORD_GUESSES = 1e8
"""zxcvbn's score 3: guesses needed by an attacker who knows the common passwords and
patterns, below which a password is refused."""
SITE_WORDS = ("tfkube",)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

_hasher = PasswordHasher()


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(stored: str, password: str) -> bool:
    try:
        return _hasher.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return False


DUMMY_HASH = hash_password("not a password of anyone")
"""Verified against when the user does not exist, so a login takes as long either way
(no user enumeration through timing)."""


def password_problem(password: str, user_name: str = "") -> str | None:
    """Why a new password is refused, or None (NIST SP 800-63B §3.1.1.2): at least
    `MIN_PASSWORD_LENGTH` characters and at most `MAX_PASSWORD_LENGTH`, any characters
    but control characters and leading or trailing spaces, no composition rules; and
    not on the blocklist: zxcvbn's estimate, which holds the 30,000 most common passwords
    of breach corpora, English words, names, keyboard walks, repeats and sequences, plus
    this site's own words (the user's name, "tfkube"), must put it at
    `MIN_PASSWORD_GUESSES` guesses or more."""
    if len(password) < MIN_PASSWORD_LENGTH:
        return f"use at least {MIN_PASSWORD_LENGTH} characters (a few unrelated words will do)"
    if len(password) > MAX_PASSWORD_LENGTH:
        return f"use at most {MAX_PASSWORD_LENGTH} characters"
    if password.strip() != password:
        return "must not start or end with spaces"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in password):
        return "must not hold control characters (newline, tab, NUL, ...)"
    if password.lower() in _common_passwords():
        return "is on the list of the most common passwords; choose another"
    words = [w for w in (user_name, *SITE_WORDS) if w]
    estimate = zxcvbn(password, user_inputs=words)
    if float(estimate["guesses"]) < MIN_PASSWORD_GUESSES:
        why = str(estimate["feedback"]["warning"] or "").rstrip(".")
        why = why[:1].lower() + why[1:] if why else "it is made of common words or patterns"
        return f"is too easy to guess ({why}); choose a longer phrase of unrelated words"
    return None


@functools.cache
def _common_passwords() -> frozenset[str]:
    return frozenset(FREQUENCY_LISTS["passwords"])


def new_secret() -> str:
    """A fresh random secret for a session id or a one-time link (URL-safe)."""
    return secrets.token_urlsafe(32)


def new_api_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def digest(secret: str) -> str:
    """What is stored for a session id or token: its SHA-256, hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def csrf_token(key: bytes, session_id: str) -> str:
    return hmac.new(key, b"csrf:" + session_id.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class CsrfVerdict:
    ok: bool
    reason: str = ""


def check_csrf(
    *,
    method: str,
    cookie_auth: bool,
    sent_token: str | None,
    expected_token: str | None,
    origin: str | None,
    referer: str | None,
    host: str | None,
) -> CsrfVerdict:
    """Whether a request may change state (pure).

    Only requests authenticated by the session cookie need it: a browser attaches the
    cookie to cross-site requests on its own, a Bearer token it never does. Such a
    request must carry the session's CSRF token in the X-CSRF-Token header and, when the
    browser names an origin (Origin, else Referer), come from this server's own origin."""
    if method.upper() in SAFE_METHODS or not cookie_auth:
        return CsrfVerdict(True)
    source = origin or referer
    if source is not None and (
        source == "null" or host is None or urlsplit(source).netloc.lower() != host.lower()
    ):
        return CsrfVerdict(False, "the request comes from another origin")
    if not sent_token or not expected_token:
        return CsrfVerdict(False, f"the {CSRF_HEADER} header is missing")
    if not hmac.compare_digest(sent_token, expected_token):
        return CsrfVerdict(False, f"the {CSRF_HEADER} header does not match the session")
    return CsrfVerdict(True)


# -- code claims ---------------------------------------------------------------------------


class ClaimError(ValueError):
    """A code claim that does not open this blob (malformed, forged, expired, other)."""


@dataclass(frozen=True)
class CodeClaim:
    job: str
    """The job's public id."""
    sha256: str
    """The one blob the claim opens."""
    exp: float
    """Expiry, seconds since the epoch."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign_claim(key: bytes, claim: CodeClaim) -> str:
    payload = _b64(
        json.dumps(
            {"job": claim.job, "sha256": claim.sha256, "exp": int(claim.exp)},
            separators=(",", ":"),
            sort_keys=True,
        ).encode()
    )
    signature = _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())
    return f"{payload}.{signature}"


SHIP_CLAIM = "ship"
"""In a claim's `sha256` field: the claim opens shipping for its job (`routes/ship.py`),
never a blob (no blob's hash is this word)."""


DATA_CLAIM = "data"
"""In a claim's `sha256` field: the claim opens its job's data door (`routes/data.py`):
the job's data set or staged source, never a blob by hash."""


def verify_claim(key: bytes, token: str, sha256: str, now: float) -> CodeClaim:
    """The claim in `token` if it is ours, unexpired and opens `sha256`; else ClaimError."""
    payload, dot, signature = token.partition(".")
    if not dot:
        raise ClaimError("malformed")
    expected = _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())
    if not hmac.compare_digest(signature, expected):
        raise ClaimError("bad signature")
    try:
        data = json.loads(_unb64(payload))
        claim = CodeClaim(job=str(data["job"]), sha256=str(data["sha256"]), exp=float(data["exp"]))
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise ClaimError("malformed") from None
    if claim.exp < now:
        raise ClaimError("expired")
    if not hmac.compare_digest(claim.sha256, sha256):
        raise ClaimError("for another artifact")
    return claim


def bearer_claim(authorization: str, key: bytes, sha256: str, now: float) -> CodeClaim:
    """The claim an `Authorization: Bearer <claim>` header carries, if it opens `sha256`
    (a blob's hash, SHIP_CLAIM or DATA_CLAIM); else ClaimError (no header, another
    scheme, or `verify_claim`'s reasons)."""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ClaimError("no bearer token")
    return verify_claim(key, token.strip(), sha256, now)
