"""Sign-in security: keyed-hash tokens (no argon2 per bad token), the upgrade of legacy argon2
rows, failure limits that never refuse a valid token, a bounded audit of failures, and a client
address that X-Forwarded-For cannot forge."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from dpcurator.errors import AuthError
from dpcurator.service.auth import HMAC_SCHEME, TokenAuthority
from dpcurator.service.errors import RateLimitedError
from dpcurator.service.ledger import Ledger
from tests.service_fixtures import CountingHasher, LiveServer


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite3'}")
    ledger.create_principal("own_1", "owner", "owner")
    return ledger


def _bearer(token: str) -> str:
    return f"Bearer {token}"


def test_tokens_are_verified_without_argon2(ledger: Ledger) -> None:
    """Issued tokens are stored as HMACs: neither a valid token nor any bad one (unknown id,
    malformed, wrong secret of a real id) runs argon2."""
    hasher = CountingHasher()
    authority = TokenAuthority(ledger, hasher=hasher, cache_seconds=0.0, max_failures=10**6)
    issued = authority.issue("own_1")
    assert authority.authenticate(_bearer(issued.token), "c").principal_id == "own_1"
    bad = ["dpc_unknown_secret", "garbage", "dpc__", f"{issued.token[:-3]}xyz", "dpc_x"]
    for token in bad * 10:
        with pytest.raises(AuthError):
            authority.authenticate(_bearer(token), "c")
    assert hasher.verified == 0
    stored = ledger.token(issued.token_id)
    assert stored is not None
    assert stored[0].secret_hash.startswith(HMAC_SCHEME)
    # Another authority on the same ledger (another process) shares the key.
    assert TokenAuthority(ledger).authenticate(_bearer(issued.token), "c").name == "owner"


def test_a_legacy_argon2_token_is_verified_once_then_stored_as_hmac(ledger: Ledger) -> None:
    hasher = CountingHasher()
    ledger.add_token("old", "own_1", hasher.hash("s3cret"))
    first = TokenAuthority(ledger, hasher=hasher)
    assert first.authenticate("Bearer dpc_old_s3cret", "c").token_id == "old"
    assert hasher.verified == 1
    stored = ledger.token("old")
    assert stored is not None
    assert stored[0].secret_hash.startswith(HMAC_SCHEME)
    second = TokenAuthority(ledger, hasher=hasher)  # no cache: the ledger's HMAC is checked
    assert second.authenticate("Bearer dpc_old_s3cret", "c").token_id == "old"
    with pytest.raises(AuthError):
        second.authenticate("Bearer dpc_old_wrong", "c")
    assert hasher.verified == 1


def test_a_legacy_token_id_under_attack_runs_argon2_boundedly(ledger: Ledger) -> None:
    """Wrong secrets for a legacy row run argon2 only up to the limit of its token id; past it
    they are refused (429) without argon2, from any client address."""
    hasher = CountingHasher()
    ledger.add_token("old", "own_1", hasher.hash("s3cret"))
    authority = TokenAuthority(ledger, hasher=hasher, max_failures=3)
    for i in range(3):
        with pytest.raises(AuthError):
            authority.authenticate("Bearer dpc_old_wrong", f"10.0.0.{i}")
    for i in range(20):
        with pytest.raises(RateLimitedError):
            authority.authenticate("Bearer dpc_old_wrong", f"10.0.1.{i}")
    assert hasher.verified == 3


def test_a_token_that_verifies_is_never_refused(ledger: Ledger) -> None:
    """Failures from an address, or in a token id's name, turn further failures into 429 but
    never refuse the valid token, from that address or any other."""
    authority = TokenAuthority(ledger, max_failures=3, cache_seconds=0.0)
    issued = authority.issue("own_1")
    for _ in range(3):
        with pytest.raises(AuthError):
            authority.authenticate("Bearer dpc_nobody_wrong", "victim")
    with pytest.raises(RateLimitedError) as limited:
        authority.authenticate("Bearer dpc_nobody_wrong", "victim")
    assert limited.value.retry_after >= 1
    assert authority.authenticate(_bearer(issued.token), "victim").principal_id == "own_1"
    wrong = _bearer(f"{issued.token[:-3]}xyz")
    for i in range(3):  # the same token id from three addresses
        with pytest.raises(AuthError):
            authority.authenticate(wrong, f"attacker-{i}")
    with pytest.raises(RateLimitedError):  # a fresh address: the token id is over its limit
        authority.authenticate(wrong, "attacker-new")
    assert authority.authenticate(_bearer(issued.token), "attacker-new").principal_id == "own_1"


def test_failed_sign_ins_are_audited_and_the_audit_is_bounded(ledger: Ledger) -> None:
    authority = TokenAuthority(ledger, max_failures=2, max_audits=20)
    for i in range(300):
        with pytest.raises((AuthError, RateLimitedError)):
            authority.authenticate("Bearer dpc_nobody_wrong", f"client-{i % 50}")
    failed = [e for e in ledger.audit_log(1000) if e.action == "sign_in_failed"]
    assert len(failed) == 20
    assert {e.detail["client"] for e in failed} <= {f"client-{i}" for i in range(50)}
    assert all(e.detail["token_id"] == "nobody" for e in failed)


def _spoofed_failures(url: str, count: int) -> list[int]:
    with httpx.Client(base_url=url, headers={"Authorization": "Bearer dpc_x_y"}) as client:
        return [
            client.get("/v1/me", headers={"X-Forwarded-For": f"203.0.113.{i}"}).status_code
            for i in range(count)
        ]


def test_x_forwarded_for_is_believed_only_from_configured_proxies(tmp_path: Path) -> None:
    """By default the client is the TCP peer: rotating X-Forwarded-For does not escape the limit
    (10 failures). With --forwarded-allow-ips naming the peer, each forwarded address counts."""
    server = LiveServer(["--ledger", f"sqlite:///{tmp_path / 'a.sqlite3'}"]).start()
    try:
        assert _spoofed_failures(server.url, 12)[-2:] == [429, 429]
    finally:
        server.stop()
    ledger = f"sqlite:///{tmp_path / 'b.sqlite3'}"
    proxied = LiveServer(["--ledger", ledger, "--forwarded-allow-ips", "127.0.0.1"]).start()
    try:
        assert set(_spoofed_failures(proxied.url, 12)) == {401}
    finally:
        proxied.stop()
