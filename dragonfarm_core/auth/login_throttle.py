"""Slowing down password guessing at the lab app's login: per user name and per client address.

A few wrong passwords are free (a typo); past that, each further one locks the name (or the
address) for a window that doubles, up to a cap, and the lock refuses even the right password,
so a guesser learns nothing while it lasts. The name is counted so that many addresses cannot
share the guessing of one account; the address so that one client cannot try many names. An
address is allowed more failures than a name: behind a reverse proxy every user has the
proxy's address. Failures are forgotten an hour after the last one, and a good password clears
its name's count. In memory: an app restart forgets them (the windows are minutes long).

Counted atomically: a check is reserved (`begin`) before the password is tried and settled
(`end`) with its answer, and checks still in flight count as failures until then, so many
wrong passwords sent at once get no more checks than the same ones sent one after another
(the free ones and the one that locks).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

FREE_PER_NAME = 5  # wrong passwords for one name before the first lock
FREE_PER_ADDRESS = 20  # wrong passwords from one address (any names) before its first lock
FIRST_LOCK_S = 30.0  # the first lock's window; each further failure doubles it
MAX_LOCK_S = 15 * 60.0
FORGET_S = 60 * 60.0  # a key's failures are forgotten this long after its last one
MAX_KEYS = 10_000  # the oldest keys are forgotten past this many (a flood of made-up names)
# The wait a check is refused with while earlier checks for its key are still being answered:
# by then they have locked the key (a wrong password) or freed it (the right one).
IN_FLIGHT_WAIT_S = 1.0


@dataclass
class _Failures:
    count: int = 0
    last: float = 0.0
    locked_until: float = 0.0


@dataclass
class LoginThrottle:
    """Counts wrong passwords per key ("name:alice", "address:10.0.0.7") and locks keys."""

    clock: Callable[[], float] = time.monotonic
    free_per_name: int = FREE_PER_NAME
    free_per_address: int = FREE_PER_ADDRESS
    keys: dict[str, _Failures] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)  # key -> checks not yet answered
    lock: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def keys_for(name: str, address: str | None) -> list[str]:
        return [f"name:{name.strip().lower()}"] + ([f"address:{address}"] if address else [])

    def wait_s(self, name: str, address: str | None) -> float:
        """Seconds until a login as `name` from `address` is tried again; 0 when it may be."""
        now = self.clock()
        ahead = [self.keys[k].locked_until - now for k in self.keys_for(name, address)
                 if k in self.keys]  # fmt: skip
        return max([0.0, *ahead])

    def begin(self, name: str, address: str | None) -> float:
        """Reserve a password check for `name` from `address`: 0 when it may go ahead (then
        `end` must follow), else the seconds to wait. A check that could be the one that locks
        a key (with those in flight counted as failures) waits for them."""
        with self.lock:
            if (wait := self.wait_s(name, address)) > 0:
                return wait
            keys = self.keys_for(name, address)
            for key in keys:
                record = self.keys.get(key)
                failures = record.count if record and self.clock() - record.last <= FORGET_S else 0
                # Checks left before the next lock falls: the free ones, then one at a time.
                left = max(1, self._free(key) + 1 - failures)
                if self.in_flight.get(key, 0) >= left:
                    return IN_FLIGHT_WAIT_S
            for key in keys:
                self.in_flight[key] = self.in_flight.get(key, 0) + 1
            return 0.0

    def end(self, name: str, address: str | None, outcome: bool | None) -> None:
        """Settle a check `begin` reserved: True (the right password), False (a wrong one) or
        None (no answer: neither counts)."""
        with self.lock:
            for key in self.keys_for(name, address):
                left = self.in_flight.pop(key, 1) - 1
                if left > 0:
                    self.in_flight[key] = left
            if outcome is True:
                self.succeeded(name)
            elif outcome is False:
                self.failed(name, address)

    def _free(self, key: str) -> int:
        return self.free_per_name if key.startswith("name:") else self.free_per_address

    def failed(self, name: str, address: str | None) -> None:
        """Record a wrong password; lock the keys past their free failures."""
        now = self.clock()
        self._forget_old(now)
        for key in self.keys_for(name, address):
            record = self.keys.pop(key, None) or _Failures()
            if now - record.last > FORGET_S:
                record = _Failures()
            record.count, record.last = record.count + 1, now
            free = self._free(key)
            if record.count > free:
                window = FIRST_LOCK_S * 2 ** (record.count - free - 1)
                record.locked_until = now + min(window, MAX_LOCK_S)
            self.keys[key] = record  # re-inserted: the dict's order is oldest failure first

    def succeeded(self, name: str) -> None:
        """A right password: that name's count starts again (the address's stays)."""
        self.keys.pop(self.keys_for(name, None)[0], None)

    def _forget_old(self, now: float) -> None:
        stale: Iterable[str] = [k for k, r in self.keys.items() if now - r.last > FORGET_S
                                and r.locked_until <= now]  # fmt: skip
        for key in list(stale):
            del self.keys[key]
        while len(self.keys) >= MAX_KEYS:
            del self.keys[next(iter(self.keys))]
