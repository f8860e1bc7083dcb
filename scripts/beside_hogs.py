"""Run a command beside N busy loops (CPU hogs), as on a machine with other work, and say how
long it took: the check that the test suite does not depend on the machine being idle.

    python scripts/beside_hogs.py 2 -- python -m pytest -q --slow -m timing
    python scripts/beside_hogs.py 2 --repeat 5 -- python -m pytest -q --slow -m timing

Exits with the command's first non-zero exit code (0 if every run passed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HOG = "while True: pass\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], usage="%(prog)s HOGS [--repeat K] -- COMMAND..."
    )
    parser.add_argument("hogs", type=int, help="busy loops to run beside the command")
    parser.add_argument("--repeat", type=int, default=1, help="runs of the command")
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        parser.error("give the command after --")
    cut = argv.index("--")
    args = parser.parse_args(argv[:cut])
    command = argv[cut + 1 :]
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.hogs)]
    status = 0
    try:
        for i in range(args.repeat):
            t0 = time.monotonic()
            code = subprocess.call(command)
            seconds = time.monotonic() - t0
            load = os.getloadavg()[0]
            print(
                f"beside_hogs: run {i + 1}/{args.repeat} beside {args.hogs} hogs: exit {code} "
                f"in {seconds:.0f} s (load average {load:.1f})",
                file=sys.stderr,
                flush=True,
            )
            status = status or code
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
