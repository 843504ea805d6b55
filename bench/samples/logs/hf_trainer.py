"""A tiny real HF Trainer run on CPU (2 ranks under torchrun, gloo): tqdm bars and loss dicts."""

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, 128, (32,), generator=g)
        return {"input_ids": ids, "labels": ids}


model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=1, n_head=2))
args = TrainingArguments(
    output_dir="/tmp/hf_out",
    per_device_train_batch_size=4,
    num_train_epochs=2,
    logging_steps=2,
    save_strategy="no",
    report_to=[],
    ddp_backend="gloo",
    use_cpu=True,
    disable_tqdm=False,
    eval_strategy="no",
    seed=1,
)
Trainer(model=model, args=args, train_dataset=Data()).train()
