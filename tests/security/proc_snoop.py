"""What a hostile reward command would try: find secrets in other processes' environments.

    python proc_snoop.py REPORT NEEDLE...

Walks up from itself through every parent to pid 1, then reads /proc/<pid>/environ of every
process it can, and writes REPORT (JSON): its ancestors, and each process whose environment
(as /proc shows it) contains one of the NEEDLEs. Run by the tests in this folder as the program
of a command reward; standard library only.
"""

import json
import os
import sys


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def environ(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return None


def main() -> None:
    report, needles = sys.argv[1], [n.encode() for n in sys.argv[2:]]
    ancestors, pid = [], os.getppid()
    while pid > 0:
        ancestors.append(pid)
        pid = parent(pid)
    readable, hits = [], []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        seen = environ(int(name))
        if seen is None:
            continue
        readable.append(int(name))
        for needle in needles:
            if needle in seen:
                hits.append({"pid": int(name), "ancestor": int(name) in ancestors})
    unreadable_ancestors = [p for p in ancestors if p not in readable]
    with open(report, "w") as f:
        json.dump(
            {
                "ancestors": ancestors,
                "unreadable_ancestors": unreadable_ancestors,
                "readable": len(readable),
                "hits": hits,
                "own_env_hits": [k for k, v in os.environ.items() if v.encode() in needles],
            },
            f,
        )


if __name__ == "__main__":
    main()
