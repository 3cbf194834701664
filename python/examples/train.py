#!/usr/bin/python3
"""A tiny training loop fed by feedline: a linear model on CPU learns each sample's class label
(the .cls member of a `feedline gen --format tar` dataset) from its first bytes, then prints
feedline's stall report. Checkpoints the loader's state each epoch (--checkpoint FILE), and
resumes from it when the file exists.

    feedline gen /tmp/ds --format tar --samples 4000 --sample-size 16k
    PYTHONPATH=build/release/python /usr/bin/python3 python/examples/train.py /tmp/ds
"""
import argparse
import json
import os

import torch

import feedline
import feedline.torch as ftorch


def label(sample):
    """Runs on feedline's decode threads, per sample: the .cls member holds the class as text."""
    return float(sample[".cls"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--checkpoint", help="loader state file (JSON): resumed from when it exists")
    args = ap.parse_args()

    ds = ftorch.IterableDataset(args.url, batch_size=args.batch_size, shuffle=True, seed=0,
                                decode_threads=2, transform=label)
    if args.checkpoint and os.path.exists(args.checkpoint):
        with open(args.checkpoint) as f:
            ds.load_state_dict(json.load(f))
        print("resuming from", args.checkpoint)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)  # feedline's own threads
    width = 256
    model = torch.nn.Linear(width, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    first = ds.state_dict()["epoch"]
    for epoch in range(first, args.epochs):
        ds.set_epoch(epoch)
        total, steps = 0.0, 0
        for batch in dl:
            x, _ = batch.to_torch(".bin")
            x = x[:, :width].float() / 255
            y = torch.tensor(batch.transformed).unsqueeze(1) / 1000  # label() made these
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
            steps += 1
            if steps % 10 == 0:  # a snapshot mid-run: the run goes on
                r = ds.report()
                print("  step %d: %.0f samples/s so far, waiting for data %.0f%% of the time" % (
                    steps, r["samples_per_second"], 100 * r["consumer_wait"]["fraction"]))
        report = ds.report()
        au = "%.0f%%" % (100 * report["au"]) if report["au"] is not None else "n/a (one step)"
        print("epoch %d: %d steps, mean loss %.4f, %.0f samples/s, AU %s, bottleneck: %s" % (
            epoch, steps, total / max(steps, 1), report["samples_per_second"], au,
            report["bottleneck"]["stage"]))
        print("  evidence:", report["bottleneck"]["evidence"])
        t = report["transform"]
        print("  transform: %.2f s for %d samples (%.0f%% of decode's busy time), %.0f%% of it off "
              "the CPU (the GIL)" % (t["seconds"], t["samples"], 100 * t["decode_share"],
                                     100 * t["off_cpu_share"]))
        if args.checkpoint:
            with open(args.checkpoint, "w") as f:
                json.dump(ds.state_dict(), f)


if __name__ == "__main__":
    main()
