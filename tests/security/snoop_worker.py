"""A stand-in inference worker that answers `status` with what its environment holds.

Selected with DRAGONFARM_WORKER_MODULE=snoop_worker; speaks the worker's JSON-lines protocol.
"""

import json
import os
import sys


def send(event):
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main():
    send({"event": "ready", "pid": os.getpid()})
    for line in sys.stdin:
        request = json.loads(line)
        with open("/proc/self/environ", "rb") as f:
            initial = f.read().decode(errors="replace")
        status = {"environ": dict(os.environ), "proc_environ": initial}
        send({"id": request["id"], "event": "done", "status": status})


if __name__ == "__main__":
    main()
