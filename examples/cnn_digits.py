"""Train a CNN on the handwritten digits bundled with kiln, with a checkpoint you can resume from.

    python examples/cnn_digits.py --epochs 2                 # train, save cnn_digits.safetensors
    python examples/cnn_digits.py --epochs 4 --resume        # load it and train epochs 3 and 4
    python examples/cnn_digits.py --epochs 1 --limit 256     # a tiny run, in seconds

After every epoch the model, optimizer, random state and epoch go into one kiln.save checkpoint.
With --resume the script loads it and continues where it stopped: each epoch's shuffle order
comes from the epoch number and dropout from the saved random state, so a resumed run prints
the same losses as an uninterrupted one.
"""
import argparse
import os

import kiln
import kiln.nn.functional as F
from kiln import nn
from kiln.data import load_digits
from kiln.utils.data import DataLoader, Subset, TensorDataset, random_split


def build_model(dropout=0.25):
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # 8x8 -> 4x4
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 4x4 -> 2x2
        nn.Flatten(), nn.Dropout(dropout), nn.Linear(32 * 2 * 2, 10),
    )


@kiln.no_grad()
def evaluate(model, loader):
    model.eval()
    correct = total = 0
    for x, y in loader:
        correct += (model(x).argmax(-1) == y).sum().item()
        total += len(y)
    return correct / total


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--limit", type=int, default=None, help="use only the first N training images")
    p.add_argument("--checkpoint", default="cnn_digits.safetensors")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    kiln.manual_seed(args.seed)
    dataset = TensorDataset(*load_digits("train"))
    if args.limit:
        dataset = Subset(dataset, range(args.limit))
    train_set, val_set = random_split(dataset, [0.9, 0.1], generator=kiln.Generator(args.seed))
    shuffle = kiln.Generator()
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, drop_last=True, generator=shuffle)
    val_loader = DataLoader(val_set, batch_size=256)

    model = build_model()
    opt = kiln.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    compiled = kiln.compile(model)

    start = 0
    if args.resume:
        if not os.path.exists(args.checkpoint):
            p.error(f"--resume: no checkpoint at {args.checkpoint}; train without --resume first")
        ckpt = kiln.load(args.checkpoint)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        kiln.set_rng_state(ckpt["rng"])
        start = ckpt["epoch"]
        print(f"resumed from {args.checkpoint} after epoch {start}")

    for epoch in range(start + 1, args.epochs + 1):
        model.train()
        shuffle.manual_seed(args.seed + epoch)  # this epoch's order, the same after a resume
        total = 0.0
        for x, y in train_loader:
            loss = F.cross_entropy(compiled(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {epoch}  train loss {total / len(train_loader):.4f}  "
              f"val accuracy {evaluate(model, val_loader):.1%}")
        kiln.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                   "rng": kiln.get_rng_state(), "epoch": epoch}, args.checkpoint)

    test_x, test_y = load_digits("test")
    print(f"test accuracy {evaluate(model, [(test_x, test_y)]):.1%}")


if __name__ == "__main__":
    main()
