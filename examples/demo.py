"""Run the trierouter demo (same as ``trierouter demo``): see ``trierouter/_demo.py``."""

import sys

from trierouter._demo import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
