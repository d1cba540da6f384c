"""Prints five ticks, waits until the file named on the command line exists, prints one more line."""

import os
import sys
import time
from pathlib import Path

me = os.environ.get("PHALANX_REPLICA", "?")
for i in range(5):
    print(f"tick {i} from {me}", flush=True)
deadline = time.monotonic() + 180
while not Path(sys.argv[1]).exists() and time.monotonic() < deadline:
    time.sleep(0.1)
print(f"released {me}", flush=True)
