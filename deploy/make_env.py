"""Write ``.env`` for Docker Compose from ``.env.example``, with fresh secrets.

    python3 deploy/make_env.py && docker compose up

Every ``change-me`` placeholder becomes a new random value (the admin API key
gets TaskForge's ``tf_`` prefix); everything else is copied as is. TaskForge
refuses to start on a placeholder secret key, so ``cp .env.example .env`` also
works, but only once those values are replaced by hand.

An existing file is never overwritten: it holds the credentials the database
was initialised with. Standard library only, so any ``python3`` on the host
runs it.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER = "change-me"
_ASSIGNMENT = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]*)=(?P<value>.*)$")


def fresh_value(name: str) -> str:
    # token_urlsafe: letters, digits, - and _ only, so the value is safe inside
    # DATABASE_URL (POSTGRES_PASSWORD) and in a shell-less .env file.
    token = secrets.token_urlsafe(32)
    return f"tf_{token}" if name.endswith("_API_KEY") else token


def render(example: str) -> tuple[str, dict[str, str]]:
    """The .env text for ``example``, and the values that were generated."""
    lines = []
    generated: dict[str, str] = {}
    for line in example.splitlines():
        match = _ASSIGNMENT.match(line)
        if match and PLACEHOLDER in match["value"]:
            value = fresh_value(match["name"])
            generated[match["name"]] = value
            line = f"{match['name']}={value}"
        lines.append(line)
    return "\n".join(lines) + "\n", generated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--example", type=Path, default=ROOT / ".env.example")
    parser.add_argument("--output", type=Path, default=ROOT / ".env")
    args = parser.parse_args(argv)

    if args.output.exists():
        print(f"{args.output} exists: keeping it (it holds the credentials of your database).")
        return 0
    text, generated = render(args.example.read_text())
    fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    username = re.search(r"^TASKFORGE_ADMIN_USERNAME=(.*)$", text, re.MULTILINE)
    print(f"Wrote {args.output} (readable by you only) with fresh secrets.")
    if "TASKFORGE_ADMIN_PASSWORD" in generated:
        user = username.group(1) if username else "admin"
        print(f"  admin login:   {user} / {generated['TASKFORGE_ADMIN_PASSWORD']}")
    if "TASKFORGE_ADMIN_API_KEY" in generated:
        print(f"  admin API key: {generated['TASKFORGE_ADMIN_API_KEY']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
