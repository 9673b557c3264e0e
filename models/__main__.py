"""`python -m models dump-table --variant linux|ibta|iwarp`: the transition table as JSON;
`python -m models fields-doc [--out docs/fields.md]`: the field ledger (models/fields.py)
as Markdown."""

import argparse
import json
import sys
from pathlib import Path

from models import fields
from models.variant import VARIANTS, variant


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    dump = sub.add_parser("dump-table", help="print the transition table as JSON")
    dump.add_argument("--variant", choices=VARIANTS, default="linux")
    doc = sub.add_parser("fields-doc", help="the field ledger as Markdown (docs/fields.md)")
    doc.add_argument("--out", type=Path, help="write it there (default: print it)")
    args = parser.parse_args(argv)
    if args.command == "fields-doc":
        text = fields.render()
        if args.out is None:
            sys.stdout.write(text)
        else:
            args.out.write_text(text)
        return 0
    json.dump(variant(args.variant).table.to_json(), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
