"""What one asv parameter process paid to unpickle the training figures (import-cost.txt). Run 18's
device call ran this code (formatted here) as a heredoc, `python3 - <<EOF`, on the GPU image alone."""

import pickle
import subprocess
import sys
import time

import torch

cases = {
    "TorchVersion": pickle.dumps({"torch": torch.__version__}),
    "str": pickle.dumps({"torch": str(torch.__version__)}),
}
for name, blob in cases.items():
    times = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import pickle; pickle.loads({blob!r})"], check=True)
        times.append(time.perf_counter() - t)
    print(
        f"fresh python3 unpickling a dict holding torch.__version__ as {name}: "
        + " ".join(f"{x:.2f}" for x in times)
        + " s"
    )
