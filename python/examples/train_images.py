#!/usr/bin/python3
"""Image classification fed by feedline: a small CNN on CPU learns the .cls labels of a JPEG tar
dataset from random-resized crops that feedline decodes on its own threads (torchvision's
RandomResizedCrop, without the DataLoader's worker processes), then prints the stall report:
on a few cores, decode is where such a job waits.

    feedline gen /tmp/images --format tar --samples 2000 --samples-per-shard 500 \\
        --image jpeg:400x350
    PYTHONPATH=build/release/python /usr/bin/python3 python/examples/train_images.py /tmp/images
"""
import argparse

import torch

import feedline.torch as ftorch


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--classes", type=int, default=10)
    args = ap.parse_args()

    ds = ftorch.IterableDataset(args.url, batch_size=args.batch_size, shuffle=True, seed=0,
                                decode_threads=2, image_size=args.image_size,
                                crop="random-resized")
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)  # feedline's own threads
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 5, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
        torch.nn.Flatten(), torch.nn.Linear(8 * 16, args.classes))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        total, steps = 0.0, 0
        for batch in dl:
            x, _ = batch.to_torch(".jpg")  # [B, H, W, 3] uint8, a view of the batch (no copy)
            x = x.permute(0, 3, 1, 2).float() / 255  # NCHW for the convolution
            y = torch.tensor([int(bytes(v)) % args.classes for v in batch.member(".cls")])
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
            steps += 1
        r = ds.report()
        print("epoch %d: %d steps, mean loss %.3f, %.0f images/s, bottleneck: %s" % (
            epoch, steps, total / max(steps, 1), r["samples_per_second"], r["bottleneck"]["stage"]))
        print("  evidence:", r["bottleneck"]["evidence"])
        print("  decoders:", ", ".join("%s -> %s for %d members" % (d["name"], d["output"], d["members"])
                                       for d in r["data_path"]["decoders"]))


if __name__ == "__main__":
    main()
