"""API tokens: issued once, stored as keyed hashes, verified in microseconds, revocable.

A token reads ``dpc_<token id>_<secret>``. The token id is public and indexes the ``tokens`` table;
the secret is 32 random bytes. Such a secret needs no slow password hash: nobody can guess 256
bits, so the ledger stores HMAC-SHA256 (RFC 2104) of the secret under a 256-bit server key kept
in the ledger (``server_secrets``, shared by every process serving it), compared in constant time
(``hmac.compare_digest``). A wrong token therefore costs a database lookup and one HMAC, not the
~400 ms of argon2 that let a few concurrent bad tokens starve valid requests.

Tokens issued before this scheme hold an argon2id hash (RFC 9106). Such a *legacy* row is
verified with argon2 once, one verification at a time (``legacy_slots``), and then rewritten with
its HMAC; a legacy token id that failed ``max_failures`` times recently is refused (429) without
running argon2 until its window passes.

A verified token is cached in memory for ``cache_seconds`` under a keyed BLAKE2b hash of the whole
token (the key is drawn per process), with the ledger's revocation epoch read just before its row
was (:mod:`dpcurator.service.ledger.epoch`: a counter that every change to a token or principal
increments, whoever makes it). Every request reads the epoch again (one lock-free primary-key
read) and trusts the cached entry only if it has not moved; otherwise, or after
``cache_seconds``, the token's row is read again for revocation and expiry (no hashing). So a
revocation made through any server process, by ``dpcurator admin`` or by hand in the database
is honoured by every process from its next request on; expiry is checked on every request. The
cache is bounded: expired entries are dropped when it grows past ``cache_size``.

Failed sign-ins are counted per client address and per (existing) token id in a sliding window
(:mod:`dpcurator.service.ratelimit`): past ``max_failures``, a failed sign-in is answered 429 with
``Retry-After`` instead of 401. A token that verifies is never refused, whatever failed before
from its address or in its name. Failures are written to the audit log (``sign_in_failed``): the
first of each address or token id per window and the one that crosses the limit, at most
``max_audits`` per window in all. The client address is the TCP peer unless the server is told
which proxies to believe (``serve --forwarded-allow-ips``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NoReturn

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from dpcurator.errors import AuthError
from dpcurator.random.rng import SecureRng
from dpcurator.service.errors import ForbiddenError, RateLimitedError
from dpcurator.service.ledger import Ledger
from dpcurator.service.models import Principal, Token, utcnow
from dpcurator.service.ratelimit import EventBudget, Failure, FailureWindow

TOKEN_PREFIX = "dpc"
#: How a stored HMAC-SHA256 secret hash starts (argon2 hashes start with ``$argon2``).
HMAC_SCHEME = "hmac-sha256$"
#: The ledger's name for the HMAC key of token secrets.
HMAC_KEY_NAME = "token-hmac-key"
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


class TokenAuthority:
    """Issues, verifies and revokes tokens.

    Args:
        ledger: where tokens, principals and the HMAC key are stored.
        hasher: the argon2 hasher of legacy token rows (tests may pass cheaper parameters).
        cache_seconds: how long a verified token is trusted without the ledger.
        cache_size: past this many cached tokens, expired entries are dropped (and, if still
            full, the whole cache: the next requests are verified again).
        max_failures, failure_window: failed sign-ins per client address and per token id
            before further failures are answered 429.
        legacy_slots: argon2 verifications of legacy rows running at once, at most.
        max_audits: failed sign-ins written to the audit log per ``failure_window``, at most.
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
        legacy_slots: int = 1,
        max_audits: int = 100,
    ) -> None:
        self._ledger = ledger
        self._hasher = hasher or PasswordHasher()
        self._key = bytes.fromhex(
            ledger.server_secret(HMAC_KEY_NAME, lambda: _RNG.random_bytes(32).hex())
        )
        self._cache_seconds = cache_seconds
        self._cache_size = cache_size
        # token hash -> (identity, trusted until (monotonic), expires at, revocation epoch)
        self._cache: dict[bytes, tuple[Identity, float, datetime | None, int]] = {}
        self._lock = threading.Lock()
        self._failures = FailureWindow(max_failures, failure_window)
        self._audits = EventBudget(max_audits, failure_window)
        self._legacy_slots = threading.BoundedSemaphore(legacy_slots)

    def _digest(self, secret: str) -> str:
        mac = hmac.new(self._key, secret.encode("utf-8"), hashlib.sha256)
        return HMAC_SCHEME + mac.hexdigest()

    def issue(
        self, principal_id: str, *, expires_in: float | None = None, by: str | None = None
    ) -> IssuedToken:
        """Create a token for a principal (optionally expiring after ``expires_in`` seconds),
        audited as issued ``by`` this owner (None: the server's operator)."""
        token_id = random_id(9)
        secret = random_id(32)
        expires_at = None if expires_in is None else utcnow() + timedelta(seconds=expires_in)
        self._ledger.add_token(token_id, principal_id, self._digest(secret), expires_at, by=by)
        return IssuedToken(token_id, f"{TOKEN_PREFIX}_{token_id}_{secret}", expires_at)

    def revoke(self, token_id: str, *, by: str) -> None:
        """Revoke a token and forget it from the cache at once."""
        self._ledger.revoke_token(token_id, by=by)
        with self._lock:
            for key in [k for k, v in self._cache.items() if v[0].token_id == token_id]:
                del self._cache[key]

    def cached(self, authorization: str | None, client: str) -> Identity | None:
        """The identity of a recently verified token whose cache entry is still trusted (no
        hashing), or None: then :meth:`authenticate` decides, in the thread pool.

        Trusting an entry needs the ledger's revocation epoch; this door reads it only where
        that read cannot block (a SQLite ledger: a local file, microseconds), and otherwise
        answers None. ``client`` is unused here (a verified token is never refused); it is
        taken so that both doors of the authority read alike.
        """
        del client
        if not self._ledger.epoch_reads_are_local:
            return None
        if authorization is None or not authorization.startswith("Bearer "):
            return None
        return self._trusted(_fast_key(authorization.removeprefix("Bearer ").strip()))[0]

    def _trusted(
        self, key: bytes
    ) -> tuple[Identity | None, tuple[Identity, float, datetime | None, int] | None, int]:
        """The identity of the cache entry ``key`` if it can be trusted now, the entry, and the
        revocation epoch (read BEFORE any token row: see dpcurator.service.ledger.epoch)."""
        epoch = self._ledger.revocation_epoch()
        with self._lock:
            cached = self._cache.get(key)
        if cached is None or cached[3] != epoch or cached[1] <= time.monotonic():
            return None, cached, epoch
        return (None if _expired(cached[2]) else cached[0]), cached, epoch

    def authenticate(self, authorization: str | None, client: str) -> Identity:
        """The identity behind an ``Authorization: Bearer <token>`` header.

        Raises:
            AuthError: no token, malformed, unknown, wrong secret, revoked or expired.
            RateLimitedError: instead of AuthError, once ``client`` or the token id failed too
                often recently (never for a token that verifies).
            LedgerUnavailableError: the ledger cannot be read (answered 503).
        """
        if authorization is None or not authorization.startswith("Bearer "):
            raise AuthError("Missing credentials: send 'Authorization: Bearer <token>'.")
        token = authorization.removeprefix("Bearer ").strip()
        key = _fast_key(token)
        # A revocation that commits after the epoch is read is seen by the row read below, or
        # moves the epoch (the entry is then read again at the next request).
        trusted, cached, epoch = self._trusted(key)
        if trusted is not None:
            return trusted
        now = time.monotonic()
        parts = token.split("_", 2)
        token_id = parts[1] if len(parts) == 3 and parts[0] == TOKEN_PREFIX else None
        try:
            # A token verified before (this very token: the key hashes all of it) needs no
            # hashing again; only whether it was revoked or has expired may have changed.
            if cached is not None:
                identity, expires_at = self._recheck(cached[0])
            else:
                identity, expires_at = self._verify(token_id, parts[-1])
        except AuthError as exc:
            with self._lock:
                self._cache.pop(key, None)
            self._refuse(exc, client, token_id)
        with self._lock:
            if len(self._cache) >= self._cache_size:
                self._cache = {k: v for k, v in self._cache.items() if v[1] > now}
                if len(self._cache) >= self._cache_size:
                    self._cache.clear()
            self._cache[key] = (identity, now + self._cache_seconds, expires_at, epoch)
        return identity

    def _refuse(self, error: AuthError, client: str, token_id: str | None) -> NoReturn:
        """Count and audit a failed sign-in, then raise ``error`` (or 429 past the limit)."""
        counted = {f"client:{client}": self._failures.record(f"client:{client}")}
        if isinstance(error, _KnownTokenError):
            counted[f"token:{token_id}"] = self._failures.record(f"token:{token_id}")
        worst = max(counted.values(), key=lambda f: (f.limited, f.retry_after))
        if any(f.count == 1 or f.count == self._failures.limit + 1 for f in counted.values()):
            self._audit(client, token_id, worst)
        if worst.limited:
            raise RateLimitedError(
                f"Too many failed sign-ins. Retry in {worst.retry_after} s.",
                retry_after=worst.retry_after,
            ) from error
        raise error

    def _audit(self, client: str, token_id: str | None, failure: Failure) -> None:
        if self._audits.take():
            self._ledger.audit(
                "sign_in_failed",
                None,
                None,
                client=client,
                token_id=token_id,
                failures=failure.count,
                limited=failure.limited,
            )

    def _recheck(self, identity: Identity) -> tuple[Identity, datetime | None]:
        """A verified token's identity, if it is still neither revoked nor expired."""
        found = self._ledger.token(identity.token_id)
        if found is None:
            raise AuthError("Invalid token.")
        return self._valid(*found)

    def _verify(self, token_id: str | None, secret: str) -> tuple[Identity, datetime | None]:
        found = None if not token_id else self._ledger.token(token_id)
        digest = self._digest(secret)  # computed for unknown ids too: the same work either way
        if found is None:
            raise AuthError("Invalid token.")
        row = found[0]
        if row.secret_hash.startswith(HMAC_SCHEME):
            if not hmac.compare_digest(row.secret_hash, digest):
                raise _KnownTokenError("Invalid token.")
        else:
            self._verify_legacy(row, secret, digest)
        return self._valid(*found)

    def _verify_legacy(self, row: Token, secret: str, digest: str) -> None:
        """Check a secret against a legacy argon2 hash (bounded), then store its HMAC."""
        limited = self._failures.limited(f"token:{row.token_id}")
        if limited is not None:
            raise RateLimitedError(
                f"Too many failed sign-ins. Retry in {limited.retry_after} s.",
                retry_after=limited.retry_after,
            )
        with self._legacy_slots:
            try:
                self._hasher.verify(row.secret_hash, secret)
            except (VerificationError, InvalidHashError) as exc:
                raise _KnownTokenError("Invalid token.") from exc
        self._ledger.rehash_token(row.token_id, row.secret_hash, digest)

    @staticmethod
    def _valid(row: Token, principal: Principal) -> tuple[Identity, datetime | None]:
        """The identity of a token whose secret matched, unless it is revoked or expired."""
        if row.revoked_at is not None:
            raise AuthError("This token has been revoked.")
        if _expired(row.expires_at):
            raise AuthError("This token has expired.")
        identity = Identity(principal.id, principal.name, principal.role, row.token_id)
        return identity, row.expires_at


class _KnownTokenError(AuthError):
    """A wrong secret for an existing token id (counted against that id as well)."""


def _expired(expires_at: datetime | None) -> bool:
    return expires_at is not None and expires_at <= utcnow()
