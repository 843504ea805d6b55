"""Rank 0 builds the vocabulary and token cache; the other ranks wait at a barrier, then all train.

The usual "let rank 0 do the preprocessing" pattern. The barrier uses the process group's timeout.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import logging
import os
import random
import re

import torch
import torch.distributed as dist
import torch.nn as nn
from common import flight
from torch.nn.parallel import DistributedDataParallel as DDP

log = logging.getLogger("prep")
WORD = re.compile(r"[a-z]+")


def synthetic_corpus(n_lines: int) -> list[str]:
    rnd = random.Random(17)
    letters = "etaoinshrdlucmfwypvbgkqjxz"
    words = ["".join(rnd.choices(letters, k=rnd.randint(2, 9))) for _ in range(5000)]
    return [" ".join(rnd.choices(words, k=24)) for _ in range(n_lines)]


def build_vocab(lines: list[str], merges: int) -> dict[str, int]:
    """A slow, pure-Python byte-pair style merge loop: fine for a toy, painful for a real corpus."""
    counts = collections.Counter(w for line in lines for w in WORD.findall(line))
    words = {tuple(w): c for w, c in counts.items()}
    vocab = {ch: i for i, ch in enumerate(sorted({ch for w in words for ch in w}))}
    for _ in range(merges):
        pairs: collections.Counter[tuple[str, str]] = collections.Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:], strict=False):
                pairs[a, b] += c
        if not pairs:
            break
        (a, b), _ = pairs.most_common(1)[0]
        merged = a + b
        vocab[merged] = len(vocab)
        new_words = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(merged)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] = c
        words = new_words
    return vocab


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--merges", type=int, default=400)
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    rank = int(os.environ["RANK"])
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s [rank{rank}] %(levelname)s %(name)s: %(message)s",
    )
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    world = dist.get_world_size()
    log.info("process group ready: %d ranks, timeout %.0fs", world, args.timeout)

    with flight.dump_on_failure():
        torch.manual_seed(0)
        warm = torch.ones(8)
        dist.all_reduce(warm)  # check every rank can talk before the long preprocessing
        if rank == 0:
            log.info("building vocabulary from %d lines (%d merges)", args.lines, args.merges)
            vocab = build_vocab(synthetic_corpus(args.lines), args.merges)
            torch.save(vocab, "vocab.pt")
            log.info("vocabulary ready: %d entries", len(vocab))
        else:
            log.info("waiting for rank 0 to finish preprocessing")
        dist.barrier()
        vocab = torch.load("vocab.pt")
        model = DDP(nn.EmbeddingBag(len(vocab), 32))
        log.info("model ready with %d embeddings", len(vocab))
        del model
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
