"""Fetch and verify a dataset before any run: ``python -m experiments.fetch_data mnist [root]``."""

import sys

from experiments.data import DataUnavailable, ensure_dataset

if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else "mnist"
    root = sys.argv[2] if len(sys.argv) > 2 else "data"
    try:
        print(f"{name}: {ensure_dataset(name, root)}")
    except (DataUnavailable, ValueError) as e:
        sys.exit(f"error: {e}")
