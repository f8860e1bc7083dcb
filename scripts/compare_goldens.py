"""Golden outputs on the larger data sets, outside CI: does a change alter any verdict JSON?

    python scripts/compare_goldens.py save  OUT_DIR --data ../shared/datasets
    python scripts/compare_goldens.py check OUT_DIR --data ../shared/datasets

``save`` runs the check (``--exact never`` and ``--exact always``, one job, a fixed memory
limit, so nothing machine-dependent enters) on every data set of ``reproduce.md`` found in
the data directory and writes each JSON, without its ``*seconds`` fields, to OUT_DIR.
``check`` runs the same and compares: it prints every field that moved and exits 1 if any
did. Run ``save`` before a refactor and ``check`` after it. The unit suite's
``tests/test_golden.py`` does the same on the small bundled sets.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kcheck.config import CheckConfig  # noqa: E402
from kcheck.pipeline import run  # noqa: E402
from kcheck.verdict import without_timing  # noqa: E402

#: The reproduce.md sets (poker is used as its file; reproduce.py's 0-vs-rest view is a
#: derived file and not needed to see drift). Large sets run only with exact mode off.
SETS = (
    "fourclass",
    "german.numer",
    "svmguide1",
    "a9a",
    "ijcnn1",
    "madelon",
    "cod-rna",
    "poker",
    "dna.scale",
)
SUFFIXES = ("", ".bz2", ".xz", ".gz")
MEMORY_LIMIT = 8 * 2**30
#: Sets small enough for ``--exact always`` (its matrices grow with rows squared).
EXACT_ALWAYS = ("fourclass", "german.numer", "svmguide1", "madelon", "dna.scale")


def find(data: Path, name: str) -> Path | None:
    for suffix in SUFFIXES:
        p = data / (name + suffix)
        if p.exists():
            return p
    return None


def outputs(data: Path, only: list[str] | None) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for name in only or SETS:
        path = find(data, name)
        if path is None:
            print(f"{name}: not in {data}, skipped", file=sys.stderr)
            continue
        for exact in ("never", "always") if name in EXACT_ALWAYS else ("never",):
            config = CheckConfig(train=str(path), exact=exact, memory_limit=MEMORY_LIMIT, jobs=1)
            key = f"{name}.exact-{exact}"
            print(f"{key} ...", file=sys.stderr, flush=True)
            v = without_timing(run(config).json)
            v["data"]["path"] = name
            found[key] = v
    return found


def diff(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += diff(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{where}.{k}")
        return out
    if a != b:
        return [f"{where}: {a!r} -> {b!r}"]
    return []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("mode", choices=["save", "check"])
    ap.add_argument("out", type=Path)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    got = outputs(args.data, args.only)
    if args.mode == "save":
        args.out.mkdir(parents=True, exist_ok=True)
        for key, v in got.items():
            (args.out / f"{key}.json").write_text(json.dumps(v, indent=1, sort_keys=True) + "\n")
        print(f"saved {len(got)} outputs in {args.out}", file=sys.stderr)
        return 0
    moved = 0
    for key, v in got.items():
        path = args.out / f"{key}.json"
        if not path.exists():
            print(f"{key}: no saved output", file=sys.stderr)
            moved += 1
            continue
        changes = diff(json.loads(path.read_text()), v)
        for c in changes:
            print(f"{key}{c}")
        moved += bool(changes)
    print(f"{len(got) - moved} of {len(got)} outputs unchanged", file=sys.stderr)
    return 1 if moved else 0


if __name__ == "__main__":
    raise SystemExit(main())
