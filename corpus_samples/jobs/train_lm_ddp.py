"""Tiny causal LM pretraining on a token corpus, DDP over gloo.

Records come from a pre-tokenized corpus; the collate function stacks them after cutting each to
the context length. One record of the corpus was truncated when the shard was written.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from common import flight
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

log = logging.getLogger("lm_pretrain")


class TokenCorpus(Dataset):
    def __init__(self, n_docs: int, vocab: int, ctx: int, truncated: set[int]) -> None:
        g = torch.Generator().manual_seed(1234)
        self.docs = []
        for i in range(n_docs):
            n = int(torch.randint(ctx + 1, 3 * ctx, (1,), generator=g))
            if i in truncated:
                n = ctx - 5
            self.docs.append(torch.randint(0, vocab, (n,), generator=g))
        self.ctx = ctx

    def __len__(self) -> int:
        return len(self.docs)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.docs[i]


def make_collate(ctx: int):
    def collate(docs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        block = torch.stack([d[: ctx + 1] for d in docs])
        return block[:, :-1], block[:, 1:]

    return collate


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mix = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.emb(tokens)
        h = h + self.mix(h)
        return self.head(h)


@record
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=16)
    args = ap.parse_args()

    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s - %(name)s - %(levelname)s - %(message)s",
    )
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    log.info("rank %d/%d up (pid %d)", rank, world, os.getpid())

    corpus = TokenCorpus(n_docs=1024, vocab=512, ctx=args.ctx, truncated={206})
    sampler = DistributedSampler(corpus, shuffle=False)
    loader = DataLoader(corpus, args.batch_size, sampler=sampler, collate_fn=make_collate(args.ctx))
    model = DDP(TinyLM(vocab=512, dim=64))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

    with flight.dump_on_failure():
        for step, (inp, tgt) in enumerate(loader, start=1):
            logits = model(inp)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if rank == 0:
                log.info("step %d loss %.4f", step, loss.item())
            if step == args.steps:
                break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
