"""``python -m taskforge_client.worker``: run the reference worker (see ``taskforge_client.worker.cli``)."""

import sys

from taskforge_client.worker.cli import main

if __name__ == "__main__":
    sys.exit(main())
