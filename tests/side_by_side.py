"""``make test``: the suite's two halves (conftest's ``_half``) as two pytest processes side
by side. The first prints as it goes; the second writes build/test-artifacts/half-2.log,
printed whole once both are done. Exit status 0 only if both halves passed.

    python tests/side_by_side.py [pytest arguments for both halves]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "build" / "test-artifacts" / "half-2.log"


def main(args: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest", "tests", *args]
    LOG.parent.mkdir(parents=True, exist_ok=True)
    with LOG.open("w") as log:
        # No cache for this one: two processes writing one .pytest_cache race.
        second = subprocess.Popen([*pytest, "--half", "2", "-p", "no:cacheprovider"], cwd=ROOT, stdout=log,
                                  stderr=subprocess.STDOUT)  # fmt: skip
        try:
            first = subprocess.call([*pytest, "--half", "1"], cwd=ROOT)
        finally:
            rest = second.wait()
    print(
        f"\n=== the second half (the fault tests on labs, three brokers, recoveries and zombies): {LOG}\n", flush=True
    )
    sys.stdout.write(LOG.read_text())
    print(f"\n=== first half: {'passed' if first == 0 else f'exit {first}'}; "
          f"second half: {'passed' if rest == 0 else f'exit {rest}'}")  # fmt: skip
    return 0 if first == rest == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
