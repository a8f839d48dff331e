"""``python -m workers``: run the reference worker (see ``workers.runner``)."""

import sys

from workers.runner import main

if __name__ == "__main__":
    sys.exit(main())
