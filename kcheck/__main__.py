"""Allow ``python -m kcheck``."""

from kcheck.cli import main

if __name__ == "__main__":
    main()
