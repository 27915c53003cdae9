"""python bench/upload_memory.py [--rows 1000000] [--mb 197]

Peak memory of loading the largest upload the app accepts, as the Data tab does: read the file
(`dragon.dataset`) then build its report; and as the Mapping tab then does: map it (prompt
`{subject}` and `{body}`, response `reply`) and build the mapped report, its tokens counted by
the bundled model's tokenizer. The file is a CSV of the example tickets' texts
recombined, `--rows` rows (the default row limit, DRAGONFARM_MAX_DATASET_ROWS) padded to about
`--mb` MB (just under the Spaces profile's 200 MB upload cap). Each phase runs in a fresh
process, so its peak resident memory (ru_maxrss) is its own; the baseline is a process that
imports the same modules and reads nothing. The figures are (peak - baseline) / file size.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICKETS = ROOT / "assets" / "example_tickets.csv"
BUNDLED = ROOT / "assets" / "models" / "tiny-support"
OUT = ROOT / "bench" / "out" / "upload_memory"

PHASE = """
import dataclasses, json, resource, sys, time
import dragonfarm_core as dragon
phase, path = sys.argv[1], sys.argv[2]
started = time.monotonic()
if phase != "baseline":
    ds = dragon.dataset(path)
    if phase == "report":
        ds.report()
    if phase == "map":
        mapped = ds.map("{subject}\\n\\n{body}", "reply")
        dataclasses.replace(mapped, frame=mapped.frame.head(1000)).rendered()  # the preview
        mapped.report(tokenizer=sys.argv[3])
print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "seconds": time.monotonic() - started}))
"""


def write_csv(path: Path, rows: int, target_mb: float, seed: int = 0) -> None:
    """`rows` rows recombined from the example tickets, each padded to reach about target_mb."""
    with TICKETS.open(encoding="utf-8", newline="") as f:
        tickets = list(csv.DictReader(f))
    rng = random.Random(seed)
    per_row = int(target_mb * 2**20 / rows)
    with path.open("w", encoding="utf-8", newline="") as f:
        out = csv.writer(f)
        out.writerow(["subject", "body", "reply"])
        for i in range(rows):
            a, b = rng.choice(tickets), rng.choice(tickets)
            reply = b["reply"][:100]
            room = max(per_row - len(a["subject"]) - len(reply) - 12, 10)  # quotes, commas, CRLF
            body = f"#{i} {a['body']} {b['body']}"
            body = (body * (1 + room // max(len(body), 1)))[:room]
            out.writerow([a["subject"], body, reply])


def phase(name: str, path: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", PHASE, name, str(path), str(BUNDLED)], cwd=ROOT,
                          capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--mb", type=float, default=197.0)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"upload-{args.rows}.csv"
    started = time.monotonic()
    write_csv(path, args.rows, args.mb)
    size_mb = path.stat().st_size / 2**20
    print(f"{path.name}: {size_mb:.0f} MB, {args.rows:,} rows ({time.monotonic() - started:.0f} s)")
    base = phase("baseline", path)["peak_mb"]
    print(f"baseline (imports only): {base:.0f} MB")
    for name in ("read", "report", "map"):
        got = phase(name, path)
        extra = got["peak_mb"] - base
        print(f"{name:>6}: peak {got['peak_mb']:.0f} MB, {extra:.0f} MB over the baseline = "
              f"{extra / size_mb:.2f} x the file, {got['seconds']:.0f} s")  # fmt: skip
    path.unlink()


if __name__ == "__main__":
    main()
