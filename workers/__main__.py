"""Deprecated: ``python -m workers`` runs ``python -m taskforge_client.worker``; kept for one release.

docker-compose.yml, deploy/kubernetes/ and existing deployments start the
worker with this command; its flags and variables are unchanged.
"""

import sys

from taskforge_client.worker.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m workers"))
