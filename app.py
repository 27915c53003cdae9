"""The dragonfarm app: `python app.py [--runs-dir DIR] [--host 127.0.0.1] [--port 7860] [--profile local]`.

Runs persist in --runs-dir, else DRAGONFARM_RUNS_DIR, else ./dragonfarm_runs; the host defaults
to the profile's (local: 127.0.0.1) and the profile to DRAGONFARM_PROFILE, else local.
"""

import argparse

from ui.context import PROFILES
from ui.layout import launch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", default=None)
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--profile", default=None, choices=sorted(PROFILES))
    args = parser.parse_args()
    launch(runs_dir=args.runs_dir, host=args.host, port=args.port, profile=args.profile)


if __name__ == "__main__":
    main()
