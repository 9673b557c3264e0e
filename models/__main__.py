"""`python -m models dump-table --variant linux|ibta|iwarp`: the transition table as JSON."""

import argparse
import json
import sys

from models.variant import VARIANTS, variant


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    dump = sub.add_parser("dump-table", help="print the transition table as JSON")
    dump.add_argument("--variant", choices=VARIANTS, default="linux")
    args = parser.parse_args(argv)
    json.dump(variant(args.variant).table.to_json(), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
