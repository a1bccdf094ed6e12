#!/usr/bin/env python3
"""A `DataModule`-shaped class over sluice: train and validation loaders from one
dataset, split by a stable hash of a key column so that no row is in both.

    python examples/dataset/datamodule.py /data/clicks --key id --features x1,x2

It has the methods Lightning calls (`setup`, `train_dataloader`, `val_dataloader`);
with Lightning installed, subclass `lightning.LightningDataModule` as well. Each
loader is a `torch.utils.data.DataLoader(batch_size=None)` over a fresh
`sluice_trainer.Dataset` (sluice batches already: no DataLoader workers), the
training one taking `--split train=0.9,valid=0.1 --take train`, the validation one
`--take valid`: the same rows in every run, epoch and table version.
"""

import argparse

import sluice_trainer


class SluiceDataModule:
    """Train and validation batches of one dataset, held apart by `split_key`."""

    def __init__(self, source, split_key, columns, batch_size=1024, valid=0.1,
                 hash_buckets=None, fill_nulls=0, **options):
        self.source = source
        # The key is among the columns read: sluice hashes it in the readers.
        columns = list(columns) + ([split_key] if split_key not in columns else [])
        self.options = dict(batch_size=batch_size, columns=columns,
                            split=f"train={1 - valid:g},valid={valid:g}",
                            split_key=split_key, hash_buckets=hash_buckets,
                            fill_nulls=fill_nulls, **options)

    def setup(self, stage=None):
        """Nothing to prepare: sluice lists and plans when a loader starts."""

    def _loader(self, take):
        import torch

        ds = sluice_trainer.Dataset(self.source, take=take, **self.options)
        return torch.utils.data.DataLoader(ds.torch_iterable(), batch_size=None)

    def train_dataloader(self):
        return self._loader("train")

    def val_dataloader(self):
        return self._loader("valid")


def main():
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("--key", default="id")
    ap.add_argument("--features", default="x1,x2")
    ap.add_argument("--label", default="label")
    args = ap.parse_args()
    features = args.features.split(",")
    dm = SluiceDataModule(args.source, args.key, features + [args.label])
    dm.setup("fit")
    model = torch.nn.Linear(len(features), 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    lossf = torch.nn.functional.binary_cross_entropy_with_logits

    def xy(t):
        return torch.stack([t[f].float() for f in features], 1), t[args.label].float()

    for t in dm.train_dataloader():
        x, y = xy(t)
        loss = lossf(model(x).squeeze(1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        losses = [lossf(model(x).squeeze(1), y).item()
                  for x, y in (xy(t) for t in dm.val_dataloader())]
    print(f"validation loss {sum(losses) / max(len(losses), 1):.4f}")


if __name__ == "__main__":
    main()
