"""``python -m taskforge_client``: the ``taskforge`` command (``taskforge_client.cli``)."""

import sys

from taskforge_client.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m taskforge_client"))
