"""The dragonfarm app: `python app.py [--runs-dir DIR] [--host 127.0.0.1] [--port 7860] [--profile local]`.

Runs persist in --runs-dir, else DRAGONFARM_RUNS_DIR, else ./dragonfarm_runs; the host defaults
to the profile's (local: 127.0.0.1) and the profile to DRAGONFARM_PROFILE, else local. The app
answers to 127.0.0.1, localhost and --host; --allowed-hosts (or DRAGONFARM_ALLOWED_HOSTS) adds
the names it is reached by through a proxy or from another machine.
"""

import argparse

from dragonfarm_core.auth.http_guard import ALLOWED_HOSTS_HELP, FORWARDED_ALLOW_IPS_HELP
from dragonfarm_core.auth.profiles import profile_names
from ui.layout import launch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", default=None)
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--profile", default=None, choices=profile_names())
    parser.add_argument("--allowed-hosts", default=None, metavar="NAMES", help=ALLOWED_HOSTS_HELP)
    parser.add_argument("--forwarded-allow-ips", default=None, metavar="ADDRESSES",
                        help=FORWARDED_ALLOW_IPS_HELP)  # fmt: skip
    args = parser.parse_args()
    try:
        launch(
            runs_dir=args.runs_dir,
            host=args.host,
            port=args.port,
            profile=args.profile,
            allowed_hosts=args.allowed_hosts,
            forwarded_allow_ips=args.forwarded_allow_ips,
        )
    except ValueError as e:  # a bad --allowed-hosts or profile: say so, no traceback
        parser.error(str(e))


if __name__ == "__main__":
    main()
