"""``python -m faults``: run the fault-injection scenarios (see ``faults.run``)."""

import sys

from faults.run import main

if __name__ == "__main__":
    sys.exit(main())
