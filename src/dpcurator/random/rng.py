"""Random number generators: the only source of entropy in dpcurator.

Two generators share one construction, a ChaCha20 keystream (RFC 8439 cipher, from the
``cryptography`` package, i.e. OpenSSL) read as uniformly random bytes:

* :class:`SecureRng` keys the stream from ``os.urandom(32)`` (the OS CSPRNG) and re-keys from
  ``os.urandom`` every :data:`REKEY_BYTES` bytes and in a forked child. It is the default
  everywhere (:func:`default_rng`).
* :class:`SeededRng` keys the stream from SHA-256 of an integer seed. It is deterministic and
  therefore **insecure**: use it only in tests and reproducible examples, never for a release.

Every method returns exactly uniform values: integers below a bound are drawn by rejection, never
by a biased ``% bound`` or float scaling. Generators are thread-safe (one lock per generator).
"""

from __future__ import annotations

import abc
import functools
import hashlib
import os
import struct
import threading
import weakref
from collections.abc import Callable
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from dpcurator._validation import check_int, fail

__all__ = ["REKEY_BYTES", "Rng", "SecureRng", "SeededRng", "default_rng"]

#: A stream is re-keyed after this many bytes (well below ChaCha20's 2^32-block counter limit).
REKEY_BYTES: Final = 2**32

#: Largest bound accepted by :meth:`Rng.integers_below` (the int64 range holds 0 .. 2^63 - 1).
MAX_BOUND: Final = 2**63

_CHUNK: Final = 1 << 20  # keystream is produced in pieces of at most 1 MiB
_ZEROS: Final = memoryview(bytes(_CHUNK))
_SMALL: Final = 256  # requests up to this many bytes are served from a buffer
_BUFFER: Final = 16384  # size of that buffer
_U64_MAX: Final = 2**64 - 1


class Rng(abc.ABC):
    """A source of uniformly random bits.

    Subclasses implement :meth:`random_bytes`; the other methods derive exactly uniform values
    from it (subclasses may override them with faster equivalents).
    """

    @abc.abstractmethod
    def random_bytes(self, n: int) -> bytes:
        """Return ``n`` independent, uniformly random bytes."""

    def _fill(self, out: npt.NDArray[np.generic]) -> None:
        """Fill a C-contiguous array with random bytes (subclasses may avoid the copy)."""
        view = out.data.cast("B")
        view[:] = self.random_bytes(len(view))

    def uint64(self, size: int) -> npt.NDArray[np.uint64]:
        """``size`` independent uniform 64-bit unsigned integers."""
        return self._uint64(check_int(type(self).__name__ + ".uint64", "size", size, minimum=0))

    def _uint32(self, size: int) -> npt.NDArray[np.uint32]:
        """``size`` independent uniform 32-bit unsigned integers (internal, unvalidated)."""
        out = np.empty(size, dtype=np.uint32)
        if size:
            self._fill(out)
        return out

    def integers_below(self, bound: int, size: int) -> npt.NDArray[np.int64]:
        """``size`` independent integers, exactly uniform on ``{0, ..., bound - 1}``.

        Uses rejection sampling: a w-bit word ``x`` (w = 32 for bounds below 2^20, else 64) is
        accepted when ``x < bound * floor((2^w - 1) / bound)``, a multiple of ``bound``, and then
        ``x % bound`` is exactly uniform. The rejection probability is below ``bound / 2^w``.
        Powers of two are masked directly. Vectorised: one batch draw per round, where the next
        round only redraws the rejected positions.

        Args:
            bound: the number of values, ``1 <= bound <= 2**63``.
            size: how many integers to return (``>= 0``).
        """
        owner = type(self).__name__ + ".integers_below"
        bound = check_int(owner, "bound", bound, minimum=1)
        if bound > MAX_BOUND:
            raise fail(owner, "bound", "<= 2**63", bound)
        size = check_int(owner, "size", size, minimum=0)
        return _integers_below(self, bound, size)

    def _uint64(self, size: int) -> npt.NDArray[np.uint64]:
        """``size`` independent uniform 64-bit unsigned integers (internal, unvalidated)."""
        out = np.empty(size, dtype=np.uint64)
        if size:
            self._fill(out)
        return out

    def _words64(self, count: int) -> tuple[int, ...]:
        """``count`` uniform 64-bit Python integers, the next ``8 * count`` bytes of the stream
        read little-endian (internal: the samplers' one-value paths)."""
        return _unpacker(count)(self.random_bytes(8 * count))

    def _word64(self) -> int:
        """One uniform 64-bit integer (internal: the samplers' one-value paths)."""
        return self._words64(1)[0]

    def coins(self, size: int) -> npt.NDArray[np.bool_]:
        """``size`` independent fair coins (each bit of the stream is one coin)."""
        size = check_int(type(self).__name__ + ".coins", "size", size, minimum=0)
        raw = np.empty((size + 7) // 8, dtype=np.uint8)
        if raw.size:
            self._fill(raw)
        return np.unpackbits(raw, count=size).view(np.bool_)


@functools.lru_cache(maxsize=64)
def _unpacker(count: int) -> Callable[..., tuple[int, ...]]:
    """The unpacker of ``count`` little-endian 64-bit words from a buffer (at an offset)."""
    return struct.Struct(f"<{count}Q").unpack_from


def _integers_below(rng: Rng, bound: int, size: int) -> npt.NDArray[np.int64]:
    """Exactly uniform integers on ``{0..bound-1}`` (arguments already validated)."""
    out = np.empty(size, dtype=np.int64)
    if size == 0:
        return out
    if bound & (bound - 1) == 0:  # a power of two: mask the low bits
        if bound <= 2**32:
            words32 = rng._uint32(size)
            np.bitwise_and(words32, np.uint32(bound - 1), out=words32)
            out[:] = words32
        else:
            words64 = rng.uint64(size)
            np.bitwise_and(words64, np.uint64(bound - 1), out=words64)
            out[:] = words64.view(np.int64)
        return out
    wide = bound >= 2**20
    top = _U64_MAX if wide else 2**32 - 1
    limit = (top // bound) * bound  # accept words < limit: a multiple of bound
    dtype = np.uint64 if wide else np.uint32
    filled = 0
    while filled < size:
        need = size - filled
        # Over-draw by the expected rejection rate so one round usually suffices.
        reject = 1.0 - limit / (top + 1)
        draw = need + int(need * reject * 1.2) + 8 if reject > 0 else need
        words: npt.NDArray[np.unsignedinteger[Any]] = (
            rng.uint64(draw) if wide else rng._uint32(draw)
        )
        if reject > 0:
            words = words[words < dtype(limit)]
        take = min(need, words.size)
        out[filled : filled + take] = words[:take] % dtype(bound)
        filled += take
    return out


class _StreamRng(Rng):
    """A ChaCha20 keystream served as random bytes; thread-safe, re-keyed every REKEY_BYTES."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._key = self._first_key()
        self._rekey_count = 0
        self._start_stream()
        _INSTANCES.add(self)

    # -- key schedule (subclasses) --------------------------------------------------------------

    @abc.abstractmethod
    def _first_key(self) -> bytes:
        """The 32-byte key of the first stream."""

    @abc.abstractmethod
    def _next_key(self) -> bytes:
        """The 32-byte key used after ``REKEY_BYTES`` bytes of output."""

    def _after_fork(self) -> None:
        """Called (under the lock) in a forked child before its first draw."""

    # -- stream ---------------------------------------------------------------------------------

    def _start_stream(self) -> None:
        # The 16-byte ChaCha20 "nonce" of `cryptography` is a 32-bit block counter followed by a
        # 96-bit nonce; every key is used for one stream only, so both start at zero.
        cipher = Cipher(algorithms.ChaCha20(self._key, bytes(16)), mode=None)
        self._encryptor = cipher.encryptor()
        self._used = 0
        self._buffer = b""
        self._pos = 0

    def _check_state(self) -> None:
        pid = os.getpid()
        if pid != self._pid:
            self._pid = pid
            self._after_fork()

    def _keystream_into(self, out: memoryview) -> None:
        """Write ``len(out)`` keystream bytes into ``out`` (lock held)."""
        done = 0
        total = len(out)
        while done < total:
            if self._used >= REKEY_BYTES:
                self._key = self._next_key()
                self._rekey_count += 1
                self._start_stream()
            step = min(total - done, _CHUNK, REKEY_BYTES - self._used)
            self._encryptor.update_into(_ZEROS[:step], out[done : done + step])
            self._used += step
            done += step

    def _keystream(self, n: int) -> bytes:
        out = bytearray(n)
        self._keystream_into(memoryview(out))
        return bytes(out)

    def random_bytes(self, n: int) -> bytes:
        """Return ``n`` uniformly random bytes from the keystream."""
        n = check_int(type(self).__name__ + ".random_bytes", "n", n, minimum=0)
        with self._lock:
            self._check_state()
            if n <= _SMALL:
                if self._pos + n > len(self._buffer):
                    self._buffer = self._keystream(_BUFFER)
                    self._pos = 0
                piece = self._buffer[self._pos : self._pos + n]
                self._pos += n
                return piece
            return self._keystream(n)

    def _words64(self, count: int) -> tuple[int, ...]:
        # The same bytes as random_bytes(8 * count) (one lock), unpacked from the buffer in place.
        if 8 * count > _SMALL:
            return super()._words64(count)
        with self._lock:
            self._check_state()
            start = self._pos
            if start + 8 * count > len(self._buffer):
                self._buffer = self._keystream(_BUFFER)
                start = 0
            self._pos = start + 8 * count
            return _unpacker(count)(self._buffer, start)

    def _fill(self, out: npt.NDArray[np.generic]) -> None:
        view = out.data.cast("B")
        if len(view) <= _SMALL:
            view[:] = self.random_bytes(len(view))
            return
        with self._lock:
            self._check_state()
            self._keystream_into(view)


#: Live stream generators, so that a forked child can replace their (possibly held) locks.
_INSTANCES: weakref.WeakSet[_StreamRng] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    for rng in list(_INSTANCES):
        rng._lock = threading.Lock()  # a lock held by another thread at fork time stays held


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)


class SecureRng(_StreamRng):
    """The default generator: a ChaCha20 keystream keyed from the OS CSPRNG.

    * Keyed with ``os.urandom(32)``; re-keyed with fresh ``os.urandom(32)`` every
      :data:`REKEY_BYTES` bytes.
    * Thread-safe: one lock serialises access to the stream.
    * Fork-safe: a child process notices the changed ``os.getpid()`` and re-keys from
      ``os.urandom`` before its first draw, so parent and child never share output.
    """

    def _first_key(self) -> bytes:
        return os.urandom(32)

    def _next_key(self) -> bytes:
        return os.urandom(32)

    def _after_fork(self) -> None:
        self._key = os.urandom(32)
        self._start_stream()

    def __repr__(self) -> str:
        return "SecureRng()"


class SeededRng(_StreamRng):
    """INSECURE deterministic generator for tests and reproducible examples only.

    The stream is ChaCha20 keyed with SHA-256 of the seed, so the same seed and the same sequence
    of calls give the same values on every platform. Anyone who knows or guesses the seed can
    reproduce the noise and subtract it: never use a ``SeededRng`` for a real release. After
    :data:`REKEY_BYTES` bytes the next key is SHA-256 of the current one. A forked child continues
    the parent's stream (it stays deterministic and so repeats the parent's values).

    Args:
        seed: any Python integer (negative values allowed).
    """

    def __init__(self, seed: int) -> None:
        self._seed = check_int("SeededRng", "seed", seed)
        super().__init__()

    def _first_key(self) -> bytes:
        length = (self._seed.bit_length() + 8) // 8
        encoded = self._seed.to_bytes(length, "big", signed=True)
        return hashlib.sha256(b"dpcurator.SeededRng.v1:" + encoded).digest()

    def _next_key(self) -> bytes:
        return hashlib.sha256(b"dpcurator.SeededRng.rekey:" + self._key).digest()

    @property
    def seed(self) -> int:
        """The seed this generator was built from."""
        return self._seed

    def __repr__(self) -> str:
        return f"SeededRng(seed={self._seed!r})  # INSECURE: deterministic, for tests only"


_DEFAULT: SecureRng | None = None
_DEFAULT_LOCK = threading.Lock()


def default_rng() -> Rng:
    """The process-wide :class:`SecureRng` (created on first use; fork-safe)."""
    global _DEFAULT  # noqa: PLW0603  # one lazily built generator per process
    if _DEFAULT is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = SecureRng()
    return _DEFAULT
