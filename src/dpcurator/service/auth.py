"""API tokens: issued once, stored as argon2 hashes, verified fast, revocable, rate-limited.

A token reads ``dpc_<token id>_<secret>``. The token id is public and indexes the ``tokens`` table;
the secret (32 random bytes) is checked against its argon2id hash. Argon2 is deliberately slow, so
a verified token is cached in memory for a short time (``cache_seconds``) under a keyed BLAKE2b
hash of the whole token (a fast hash is enough: the secret has 256 bits of entropy; the key is
drawn per process, so the cache never holds anything that verifies a token elsewhere). After that
time the same token is re-checked against the ledger for revocation and expiry only, without
argon2 (its secret was verified already). Revoking a token through this server drops it from the
cache at once (another server process sharing the ledger notices within ``cache_seconds``);
expiry is checked on every request. The cache is bounded: expired entries are dropped when it
grows past ``cache_size``.

Failed sign-ins are counted per client address in a sliding window; past the limit the client is
refused (429) for the rest of the window, valid token or not.
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from dpcurator.errors import AuthError
from dpcurator.random.rng import SecureRng
from dpcurator.service.errors import ForbiddenError, RateLimitedError
from dpcurator.service.ledger import Ledger
from dpcurator.service.models import Principal, Token, utcnow

TOKEN_PREFIX = "dpc"
_RNG = SecureRng()


@dataclass(frozen=True)
class Identity:
    """Who is calling: a principal, its role and the id of the token it used."""

    principal_id: str
    name: str
    role: str
    token_id: str

    @property
    def is_owner(self) -> bool:
        """Whether the caller is a data owner."""
        return self.role == "owner"

    def require_owner(self) -> None:
        """Raise :class:`ForbiddenError` unless the caller is an owner."""
        if not self.is_owner:
            raise ForbiddenError("This operation is reserved to data owners.")


@dataclass(frozen=True)
class IssuedToken:
    """A freshly issued token. ``token`` is shown once and never stored in clear."""

    token_id: str
    token: str
    expires_at: datetime | None


def random_id(nbytes: int) -> str:
    """A random identifier of ``nbytes`` bytes (letters and digits) from :class:`SecureRng`."""
    text = base64.b64encode(_RNG.random_bytes(nbytes), altchars=b"xy").decode("ascii")
    return text.rstrip("=")


_CACHE_KEY = _RNG.random_bytes(32)


def _fast_key(token: str) -> bytes:
    return hashlib.blake2b(token.encode("utf-8"), key=_CACHE_KEY, digest_size=32).digest()


class _FailureWindow:
    """Failed sign-ins per client in a sliding window (thread-safe)."""

    def __init__(self, limit: int, window: float) -> None:
        self.limit = limit
        self.window = window
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _prune(self, client: str, now: float) -> deque[float]:
        failures = self._failures.setdefault(client, deque())
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        return failures

    def check(self, client: str) -> None:
        now = time.monotonic()
        with self._lock:
            failures = self._prune(client, now)
            if len(failures) >= self.limit:
                retry = max(1, int(failures[0] + self.window - now) + 1)
                raise RateLimitedError(
                    f"Too many failed sign-ins from this client. Retry in {retry} s.",
                    retry_after=retry,
                )

    def record(self, client: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._prune(client, now).append(now)


class TokenAuthority:
    """Issues, verifies and revokes tokens.

    Args:
        ledger: where tokens and principals are stored.
        hasher: the argon2 hasher (tests may pass cheaper parameters).
        cache_seconds: how long a verified token is trusted without argon2.
        cache_size: past this many cached tokens, expired entries are dropped (and, if still
            full, the whole cache: the next requests verify with argon2 again).
        max_failures, failure_window: rate limit of failed sign-ins per client address.
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        hasher: PasswordHasher | None = None,
        cache_seconds: float = 30.0,
        cache_size: int = 10_000,
        max_failures: int = 10,
        failure_window: float = 60.0,
    ) -> None:
        self._ledger = ledger
        self._hasher = hasher or PasswordHasher()
        self._dummy_hash = self._hasher.hash("dpcurator-dummy-secret")
        self._cache_seconds = cache_seconds
        self._cache_size = cache_size
        self._cache: dict[bytes, tuple[Identity, float, datetime | None]] = {}
        self._lock = threading.Lock()
        self._failures = _FailureWindow(max_failures, failure_window)

    def issue(self, principal_id: str, *, expires_in: float | None = None) -> IssuedToken:
        """Create a token for a principal (optionally expiring after ``expires_in`` seconds)."""
        token_id = random_id(9)
        secret = random_id(32)
        expires_at = None if expires_in is None else utcnow() + timedelta(seconds=expires_in)
        self._ledger.add_token(token_id, principal_id, self._hasher.hash(secret), expires_at)
        return IssuedToken(token_id, f"{TOKEN_PREFIX}_{token_id}_{secret}", expires_at)

    def revoke(self, token_id: str, *, by: str) -> None:
        """Revoke a token and forget it from the cache at once."""
        self._ledger.revoke_token(token_id, by=by)
        with self._lock:
            for key in [k for k, v in self._cache.items() if v[0].token_id == token_id]:
                del self._cache[key]

    def cached(self, authorization: str | None, client: str) -> Identity | None:
        """The identity of a recently verified token (no database, no argon2), or None.

        Raises:
            RateLimitedError: this client failed too often recently.
        """
        self._failures.check(client)
        if authorization is None or not authorization.startswith("Bearer "):
            return None
        key = _fast_key(authorization.removeprefix("Bearer ").strip())
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached[1] > time.monotonic() and not _expired(cached[2]):
            return cached[0]
        return None

    def authenticate(self, authorization: str | None, client: str) -> Identity:
        """The identity behind an ``Authorization: Bearer <token>`` header.

        Raises:
            RateLimitedError: this client failed too often recently.
            AuthError: no token, malformed, unknown, wrong secret, revoked or expired.
        """
        identity = self.cached(authorization, client)
        if identity is not None:
            return identity
        if authorization is None or not authorization.startswith("Bearer "):
            raise AuthError("Missing credentials: send 'Authorization: Bearer <token>'.")
        token = authorization.removeprefix("Bearer ").strip()
        key = _fast_key(token)
        now = time.monotonic()
        with self._lock:
            stale = self._cache.pop(key, None)
        try:
            # A token verified before (this very token: the key hashes all of it) needs no
            # argon2 again; only whether it was revoked or has expired may have changed.
            identity, expires_at = self._verify(token) if stale is None else self._recheck(stale[0])
        except AuthError:
            self._failures.record(client)
            raise
        with self._lock:
            if len(self._cache) >= self._cache_size:
                self._cache = {k: v for k, v in self._cache.items() if v[1] > now}
                if len(self._cache) >= self._cache_size:
                    self._cache.clear()
            self._cache[key] = (identity, now + self._cache_seconds, expires_at)
        return identity

    def _recheck(self, identity: Identity) -> tuple[Identity, datetime | None]:
        """A verified token's identity, if it is still neither revoked nor expired."""
        found = self._ledger.token(identity.token_id)
        if found is None:
            raise AuthError("Invalid token.")
        return self._valid(*found)

    def _verify(self, token: str) -> tuple[Identity, datetime | None]:
        parts = token.split("_", 2)
        found = None
        if len(parts) == 3 and parts[0] == TOKEN_PREFIX:
            found = self._ledger.token(parts[1])
        secret = parts[2] if len(parts) == 3 else token
        stored_hash = self._dummy_hash if found is None else found[0].secret_hash
        try:
            self._hasher.verify(stored_hash, secret)
        except (VerificationError, InvalidHashError) as exc:
            raise AuthError("Invalid token.") from exc
        if found is None:
            raise AuthError("Invalid token.")
        return self._valid(*found)

    @staticmethod
    def _valid(row: Token, principal: Principal) -> tuple[Identity, datetime | None]:
        """The identity of a token whose secret matched, unless it is revoked or expired."""
        if row.revoked_at is not None:
            raise AuthError("This token has been revoked.")
        if _expired(row.expires_at):
            raise AuthError("This token has expired.")
        identity = Identity(principal.id, principal.name, principal.role, row.token_id)
        return identity, row.expires_at


def _expired(expires_at: datetime | None) -> bool:
    return expires_at is not None and expires_at <= utcnow()
