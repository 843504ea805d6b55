"""Re-save a real torch dump with Python's pickler, protocols 2 to 5, as users re-save them
(`pickle.dump(pickle.load(f), out)` after a look at it, or a tool that copies dumps).

    python bench/samples/fr/python_layouts.py   # writes python_p{2,3,4,5}_rank_1.pkl here

Our own file, loaded with the stdlib: the dump came from our own gloo job (fr_real.py).
"""

from __future__ import annotations

import pickle
from pathlib import Path

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    dump = pickle.loads((HERE / "torch_rank_1.pkl").read_bytes())
    for protocol in (2, 3, 4, 5):
        (HERE / f"python_p{protocol}_rank_1.pkl").write_bytes(pickle.dumps(dump, protocol))
