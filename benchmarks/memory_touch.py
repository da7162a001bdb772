"""What fresh memory costs on this machine: the seconds to touch (first write) N GiB in a new
process after the machine sat idle, and right after another process freed as much.

On a VM whose balloon driver reports free pages to the host (virtio_balloon free page
reporting; see /sys/module/page_reporting), memory the guest freed a few seconds ago is given
back to the host, and the next first touch of it faults into the host, which can cost ten times
more than on bare metal. Every stage that decodes text into new buffers or writes files (page
cache is fresh memory too) pays it, so wall times of the same commit move with what ran just
before. Print this next to benchmark figures to compare machines.

  python -m benchmarks.memory_touch            # 2 GiB, 10 s idle before the cold round
  python -m benchmarks.memory_touch --gib 3 --idle 20
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

TOUCH = """
import sys, time
import numpy as np
started = time.perf_counter()
block = np.ones(int(float(sys.argv[1]) * 2**30) // 8)
print(f"{time.perf_counter() - started:.3f}")
"""


def touch_seconds(gib: float) -> float:
    done = subprocess.run([sys.executable, "-c", TOUCH, str(gib)], capture_output=True, text=True, check=True)
    return float(done.stdout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds to wait before the cold round")
    args = parser.parse_args(argv)
    reporting = Path("/sys/module/page_reporting/parameters/page_reporting_order")
    order = reporting.read_text().strip() if reporting.exists() else "absent"
    print(f"free page reporting (page_reporting_order): {order}")
    time.sleep(args.idle)
    cold = touch_seconds(args.gib)
    warm = touch_seconds(args.gib)  # the pages the first process just freed
    print(f"first touch of {args.gib:g} GiB after {args.idle:g} s idle: {cold:.2f} s ({cold / args.gib:.2f} s/GiB)")
    print(f"the same right after another process freed it: {warm:.2f} s ({warm / args.gib:.2f} s/GiB)")
    print(f"ratio cold/warm: {cold / warm:.1f}x")


if __name__ == "__main__":
    main()
