"""A tiny real Lightning run on CPU, 2 ranks (ddp, gloo): its TQDM progress bar with loss."""

import lightning as L
import torch


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(32, 1)

    def training_step(self, batch, i):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


g = torch.Generator().manual_seed(0)
ds = torch.utils.data.TensorDataset(
    torch.randn(512, 32, generator=g), torch.randn(512, 1, generator=g)
)
trainer = L.Trainer(
    accelerator="cpu",
    devices=2,
    strategy="ddp",
    max_epochs=3,
    log_every_n_steps=5,
    enable_checkpointing=False,
    logger=False,
    callbacks=[L.pytorch.callbacks.TQDMProgressBar(refresh_rate=1)],
)
trainer.fit(Tiny(), torch.utils.data.DataLoader(ds, batch_size=8))
