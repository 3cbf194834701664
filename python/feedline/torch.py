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
import sys
import warnings

import torch
import torch.utils.data

from . import Batch, Loader

__all__ = ["IterableDataset"]

_IN_WORKERS = (
    "feedline.torch.IterableDataset runs its own threads (storage, decode, collate) and its "
    "batches cannot cross processes: give DataLoader num_workers=0, as in "
    "DataLoader(dataset, batch_size=None, num_workers=0) (feedline's decode_threads= sets its "
    "parallelism)")


_REGROUPED = (
    "DataLoader(batch_size=%s) would group feedline's batches into batches of batches: give "
    "DataLoader batch_size=None (DataLoader's default is 1), as in DataLoader(dataset, "
    "batch_size=None, num_workers=0); feedline's batch_size= sets the batch")
_PINNED = (
    "DataLoader(pin_memory=True) cannot pin a feedline batch (its samples stay in feedline's "
    "buffer pool): give DataLoader pin_memory=False; feedline copies batches to the GPU itself, "
    "from pinned buffers, with device='cuda:0'")


def _refuse_regrouping(batches, *, collate_fn_map=None):
    raise TypeError(_REGROUPED % len(batches))


def _calling_dataloader():
    """The DataLoader whose iterator is calling iter() on the dataset, where it is one: its
    iterator's __init__ (a few frames up, as torch's DataLoader makes its fetcher) holds it as
    ``loader``. None otherwise (iterated directly, or another torch's frames)."""
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return None
        loader = frame.f_locals.get("loader")
        if isinstance(loader, torch.utils.data.DataLoader):
            return loader
        frame = frame.f_back
    return None


def _check_dataloader(loader):
    """Refuses what DataLoader would do wrong with feedline's batches, before any is read."""
    if loader.batch_size is not None:
        raise TypeError(_REGROUPED % loader.batch_size)
    if loader.pin_memory and torch.cuda.is_available():
        raise TypeError(_PINNED)


def _refuse_pinning(batch, *args, **kwargs):
    raise TypeError(_PINNED)


# DataLoader with a batch_size (1 unless given None) collates what the dataset yields with
# default_collate, whose table of types (torch >= 1.13) says what to do with a feedline Batch:
# refuse, saying what to write. With pin_memory=True its pin thread calls batch.pin_memory().
# (IterableDataset.__iter__ refuses both before any batch is read, where it finds the DataLoader
# calling it; these are for another collate path or another torch.)
_collate = getattr(torch.utils.data._utils.collate, "default_collate_fn_map", None)
if _collate is not None:
    _collate[Batch] = _refuse_regrouping
Batch.pin_memory = _refuse_pinning


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
        self._last_epoch = None  # the last pass's epoch, when it started afresh
        self._epoch_set = False  # set_epoch() called since the last pass started
        self._warned_epoch = False
        self._interrupted_open = None  # a pass whose loader an interrupt stopped opening

    def set_epoch(self, epoch):
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError("epoch must be a whole number >= 0")
        self._epoch = epoch
        self._epoch_set = True
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
        dataloader = _calling_dataloader()
        if dataloader is not None:
            _check_dataloader(dataloader)
        return self._iterate()

    def _iterate(self):
        if self._next is not None:
            (loader, epoch, resumed), self._next = self._next, None
        else:
            try:
                loader, epoch, resumed = self._open()
            except KeyboardInterrupt:
                self._interrupted_open = self._epoch
                raise
        self._interrupted_open = None
        if not resumed:
            self._warn_same_epoch(epoch)
        self._loader, self._loader_epoch = loader, epoch
        try:
            for batch in loader:
                yield batch
        finally:
            loader.close()  # its state_dict() and report() stay

    def _warn_same_epoch(self, epoch):
        # A pass with the last one's epoch, set_epoch() not called between: it repeats the
        # order, set_epoch() forgotten (called, it is the user's choice: a replay).
        if (self._last_epoch == epoch and not self._epoch_set and not self._warned_epoch and
                self._options.get("shuffle", True) is not False):
            self._warned_epoch = True
            warnings.warn(
                "feedline.torch.IterableDataset: this pass has epoch %d again, the order of the "
                "last one: call ds.set_epoch(epoch) before each pass (as DistributedSampler "
                "needs), or every epoch sees the samples in the same order" % epoch,
                RuntimeWarning, stacklevel=3)
        self._last_epoch = epoch
        self._epoch_set = False

    def __reduce__(self):
        # DataLoader's workers under the spawn and forkserver start methods get the dataset
        # pickled: refused here, in the main process, before a worker starts.
        raise TypeError(_IN_WORKERS)

    def report(self, own=False):
        """The last (or current) pass's report, as Loader.report() (under torch.distributed,
        rank 0's is the job's once the pass has ended). Before any pass: RuntimeError. After a
        Ctrl-C that stopped a pass while its loader was opening: a document of that pass with
        "interrupted" true and nothing delivered."""
        if self._interrupted_open is not None:
            return {"schema": 1, "interrupted": True, "error": None, "epochs": 0,
                    "samples": 0, "batches": 0, "bytes": 0, "snapshot": False,
                    "epoch": self._interrupted_open,
                    "notes": ["interrupted while the dataset was being opened: no batch was "
                              "delivered"]}
        if self._loader is None:
            raise RuntimeError("no pass has run yet: iterate over the dataset first")
        return self._loader.report(own=own)

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
