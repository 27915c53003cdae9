"""Slowing down password guessing at the lab app's login: per user name and per client address.

A few wrong passwords are free (a typo); past that, each further one locks the name (or the
address) for a window that doubles, up to a cap, and the lock refuses even the right password,
so a guesser learns nothing while it lasts. The name is counted so that many addresses cannot
share the guessing of one account; the address so that one client cannot try many names. An
address is allowed more failures than a name: behind a reverse proxy every user has the
proxy's address. Failures are forgotten an hour after the last one, and a good password clears
its name's count. In memory: an app restart forgets them (the windows are minutes long).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

FREE_PER_NAME = 5  # wrong passwords for one name before the first lock
FREE_PER_ADDRESS = 20  # wrong passwords from one address (any names) before its first lock
FIRST_LOCK_S = 30.0  # the first lock's window; each further failure doubles it
MAX_LOCK_S = 15 * 60.0
FORGET_S = 60 * 60.0  # a key's failures are forgotten this long after its last one
MAX_KEYS = 10_000  # the oldest keys are forgotten past this many (a flood of made-up names)


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

    @staticmethod
    def keys_for(name: str, address: str | None) -> list[str]:
        return [f"name:{name.strip().lower()}"] + ([f"address:{address}"] if address else [])

    def wait_s(self, name: str, address: str | None) -> float:
        """Seconds until a login as `name` from `address` is tried again; 0 when it may be."""
        now = self.clock()
        ahead = [self.keys[k].locked_until - now for k in self.keys_for(name, address)
                 if k in self.keys]  # fmt: skip
        return max([0.0, *ahead])

    def failed(self, name: str, address: str | None) -> None:
        """Record a wrong password; lock the keys past their free failures."""
        now = self.clock()
        self._forget_old(now)
        for key in self.keys_for(name, address):
            record = self.keys.pop(key, None) or _Failures()
            if now - record.last > FORGET_S:
                record = _Failures()
            record.count, record.last = record.count + 1, now
            free = self.free_per_name if key.startswith("name:") else self.free_per_address
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
