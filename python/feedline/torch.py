"""feedline for PyTorch: an IterableDataset that DataLoader passes through.

    ds = feedline.torch.IterableDataset("s3://bucket/train/", batch_size=256, shuffle=True)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for batch in dl:
            x, lengths = batch.to_torch(".bin")

feedline does its own parallelism (storage and decode threads in C++, a bounded pool of batch
buffers): give DataLoader ``batch_size=None`` (feedline's batches pass through) and
``num_workers=0`` (worker processes would each run a whole loader and copy every batch through
shared memory). Rank and world size come from torch.distributed once it is initialised.
"""
import torch.utils.data

from . import Loader

__all__ = ["IterableDataset"]

_IN_WORKERS = (
    "feedline.torch.IterableDataset runs its own threads (storage, decode, collate) and its "
    "batches cannot cross processes: give DataLoader num_workers=0, as in "
    "DataLoader(dataset, batch_size=None, num_workers=0) (feedline's decode_threads= sets its "
    "parallelism)")


class IterableDataset(torch.utils.data.IterableDataset):
    """One pass over the dataset per iteration: epoch ``set_epoch(n)`` (as DistributedSampler),
    shuffled by (seed, epoch); the options are feedline.Loader's (``transform=`` included: per
    sample, on feedline's decode threads). ``state_dict()``/``load_state_dict()`` resume a pass
    mid-epoch, also on another number of ranks: the next iteration delivers exactly the batches
    the saved one had not."""

    def __init__(self, url, **options):
        super().__init__()
        if "epochs" in options:
            raise TypeError("IterableDataset is one epoch per iteration: use set_epoch(), not epochs=")
        self._url = url
        self._options = options
        self._epoch = 0
        self._loader = None
        self._resume = None
        self._next = None  # (loader, epoch, resumed): the next pass's, opened early by len()
        self._len = None

    def set_epoch(self, epoch):
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError("epoch must be a whole number >= 0")
        self._epoch = epoch
        if self._next is not None and self._next[1] != epoch and not self._next[2]:
            self._drop_next()  # (a pass resumed from a state_dict keeps the state's epoch)

    def __len__(self):
        """The batches of one pass on this rank, as len(DataLoader(ds, batch_size=None)) says
        them (the equal-batches rule applied; every pass has as many). Before the first pass it
        opens the next one's loader, which that pass then uses: the dataset is listed once."""
        if self._len is None:
            if self._loader is None and self._next is None:
                self._next = self._open()
            self._len = len(self._next[0] if self._next is not None else self._loader)
        return self._len

    def _open(self):
        state, self._resume = self._resume, None
        epoch = state["epoch"] if state else self._epoch
        loader = Loader(self._url, state=state["loader"] if state else None, _start_epoch=epoch,
                        epochs=epoch + 1, **self._options)
        return loader, epoch, state is not None

    def _drop_next(self):
        self._next[0].close()
        self._next = None

    def __iter__(self):
        # Not a generator: DataLoader's worker process calls iter() as it starts, and hears at
        # once (it sends the error to the main process, which raises it at its first next()).
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError(_IN_WORKERS)
        return self._iterate()

    def _iterate(self):
        if self._next is not None:
            (loader, epoch, _), self._next = self._next, None
        else:
            loader, epoch, _ = self._open()
        self._loader, self._loader_epoch = loader, epoch
        try:
            for batch in loader:
                yield batch
        finally:
            loader.close()  # its state_dict() and report() stay

    def __reduce__(self):
        # DataLoader's workers under the spawn and forkserver start methods get the dataset
        # pickled: refused here, in the main process, before a worker starts.
        raise TypeError(_IN_WORKERS)

    def report(self):
        """The last (or current) pass's report, as Loader.report()."""
        if self._loader is None:
            raise RuntimeError("no pass has run yet")
        return self._loader.report()

    def state_dict(self):
        if self._loader is None:
            return {"epoch": self._epoch, "loader": None}
        state = self._loader.state_dict()
        if state["epoch"] > self._loader_epoch:  # the pass is over: the next one starts afresh
            return {"epoch": self._loader_epoch + 1, "loader": None}
        return {"epoch": self._loader_epoch, "loader": state}

    def load_state_dict(self, state):
        if not isinstance(state, dict) or "epoch" not in state:
            raise ValueError("not a feedline.torch.IterableDataset state (from state_dict())")
        self._epoch = state["epoch"]
        self._resume = state if state.get("loader") else None
        if self._next is not None:  # opened by len() for where the dataset stood before
            self._drop_next()
