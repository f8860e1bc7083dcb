"""``pip install .`` ships every package and data file of the source tree.

The wheel is built as pip builds it (setuptools, without build isolation so that no network
is needed) and its file list is compared with the tree: a new subpackage or data file that
packaging would leave out fails here rather than on a user's machine.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_holds_every_module_and_data_file(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = tmp_path.glob("kcheck-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    source = ROOT / "kcheck"
    wanted = {
        str(p.relative_to(ROOT))
        for p in source.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".json", ".typed")
    }
    assert wanted, "no source files found"
    missing = sorted(wanted - shipped)
    assert not missing, f"the wheel leaves out: {missing}"
    # Tests, scripts and data sets are not installed into site-packages.
    assert not any(n.startswith(("tests/", "scripts/", "datasets/")) for n in shipped)
