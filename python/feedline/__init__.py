"""feedline: a data loader for training jobs, with a stall report.

    import feedline
    loader = feedline.Loader("s3://bucket/train/", batch_size=256, epochs=2, seed=0)
    for batch in loader:
        x = batch.member(".bin")        # zero-copy numpy uint8 views, one per sample
        t, lengths = batch.to_torch(".bin")
    print(loader.report()["bottleneck"])

Settings are keywords, one per knob of the library's settings table (``help(feedline.Loader)``
lists them with their defaults; `feedline run`'s flags are the same names with dashes:
``io_depth=64`` is ``--io-depth 64``, ``shuffle=False`` is ``--no-shuffle``): a count takes an
int, a size or duration a str ("64MiB", "2ms"; a size also an int of bytes), a flag True or
False (1 and 0 too); None leaves a setting at its default. The library checks each value, as it
checks the CLI's, and an error names the keyword. The pipeline (storage reads, decode threads, collate into a
bounded pool of batch buffers) runs in C++ threads: iterating waits for a batch with the GIL
released, and the time between two batches is counted as your training step's compute.
"""
import atexit
import inspect
import json
import operator
import os
import warnings

try:
    from . import _feedline
except ImportError as _e:  # the package's .py files without the native module beside them
    if any(n.startswith("_feedline") for n in os.listdir(os.path.dirname(__file__))):
        raise  # there, but it does not load: its own error says why
    raise ImportError(
        "feedline's native module (_feedline) is not built beside %s: build it with "
        "`cmake --build build/release --target _feedline` (scripts/demo.sh does), or install the "
        "package with `pip install ./python` (docs/PYTHON.md)" % os.path.dirname(__file__)) from _e

Error = _feedline.Error  # storage and data errors: an OSError whose message names the object

from . import _job  # noqa: E402  (it needs Error)

# Loaders still open at exit are closed while the interpreter is whole: freed during its
# finalization, a pipeline thread waiting for the GIL would be ended mid-call.
atexit.register(_feedline._close_all)

__all__ = ["Loader", "Batch", "Error", "decode_image", "MAX_PIXELS"]

# The loader's settings, from the library's table (feedline/loader/settings.hpp): each keyword's
# type, default, range and one line of help. Those only the command line takes (an emulated
# accelerator's compute, repeated runs, a utilisation target) are not keywords: the training
# loop that iterates is the real thing.
_SETTINGS = {s["name"]: s for s in _feedline._settings() if s["scope"] == "loader"}
# Keywords of earlier releases that named a flag the other way round (no_index=True is
# index=False): still taken, with a DeprecationWarning.
_RENAMED = {"no_index": "index", "no_accounting": "accounting", "no_dct_scaling": "dct_scaling",
            "no_sign_request": "sign_request"}
_ANNOTATIONS = {"flag": bool, "count": int, "number": float, "size": "int | str",
                "duration": str, "choice": str, "path": "str | os.PathLike", "text": str}


def _python_default(setting):
    """A setting's default as Python writes it (None for a setting left unset)."""
    text, kind = setting["default"], setting["type"]
    if text == "":
        return None
    if kind == "flag":
        return text == "true"
    if kind == "count":
        return int(text)
    if kind == "number":
        return float(text)
    return text


def _is_bool(value):
    """A bool, Python's or numpy's (np.bool_ is no subclass of bool, and operator.index takes it
    as 0 or 1)."""
    t = type(value)
    return isinstance(value, bool) or (t.__module__ == "numpy" and t.__name__ in ("bool_", "bool"))


def _keyword_value(key, value):
    """The text of keyword `key`'s value for the library, which checks it. TypeError for a value
    of the wrong type (a bool for a number, a float for a count), ValueError for an empty text;
    each names the keyword."""
    kind = _SETTINGS[key]["type"]
    if kind == "flag":
        # True/False, and 0/1 as C and the CLI's config files write them.
        if _is_bool(value) or (type(value) is int and value in (0, 1)):
            return "true" if value else "false"
        raise TypeError("%s is a flag: True or False, not %r" % (key, value))
    if _is_bool(value):
        raise TypeError("%s takes a value, not %r (None leaves it at its default)" % (key, value))
    if kind == "count":
        try:
            return str(operator.index(value))  # int, numpy integers; not float, not str
        except TypeError:
            raise TypeError("%s must be an int, not %s" % (key, type(value).__name__)) from None
    if kind == "number":
        if isinstance(value, (int, float)):
            return repr(float(value))
        raise TypeError("%s must be a number, not %s" % (key, type(value).__name__))
    if kind == "path" and isinstance(value, os.PathLike):
        value = os.fsdecode(os.fspath(value))
    elif isinstance(value, (int, float)) and kind in ("size", "duration"):
        value = str(value)  # a size in bytes (memory_budget=256 << 20), a duration in seconds
    elif not isinstance(value, str):
        raise TypeError("%s must be a str%s, not %s" % (
            key, " or a path" if kind == "path" else "", type(value).__name__))
    if value == "":
        raise ValueError("%s='' is empty: give a value, or None for the default" % key)
    return value


def _settings_args(options):
    """The (name, text) pairs of the keywords given (None leaves a setting at its default)."""
    out = []
    for key, value in options.items():
        if key in _RENAMED and value is not None:
            if not (_is_bool(value) or (type(value) is int and value in (0, 1))):
                raise TypeError("%s is a flag: True or False, not %r" % (key, value))
            new, value = _RENAMED[key], not value
            warnings.warn("the keyword %s=%r is %s=%r now" % (key, not value, new, value),
                          DeprecationWarning, stacklevel=3)
            key = new
        if key not in _SETTINGS:
            raise TypeError("Loader() got an unexpected keyword argument %r" % key)
        if value is None:
            continue
        out.append((key, _keyword_value(key, value)))
    return out


def _url_bytes(url):
    """The dataset's URL as bytes, as Linux's names are (a URL that is not UTF-8 stays as it
    is)."""
    if not isinstance(url, (str, bytes, os.PathLike)):
        raise TypeError("url must be a str, bytes or a path, not %s" % type(url).__name__)
    url = os.fsencode(url)
    if not url:
        raise ValueError("url is empty: give a directory or a file://, s3://, http(s):// or "
                         "nfs:// URL")
    return url


def _suffix(suffix):
    """A member name's ending as the native side compares it: bytes (os.fsencode, so a str
    from Batch.keys or a transform's dict matches a name that is not UTF-8)."""
    if not isinstance(suffix, (str, bytes)):
        raise TypeError("suffix must be a str, not %s" % type(suffix).__name__)
    return os.fsencode(suffix)


class Batch:
    """One batch: its samples packed in one buffer of the loader's pool.

    ``member(suffix)`` gives each sample's member ending in suffix as a read-only numpy uint8
    view of that buffer (no copy), shaped (height, width, 3) for a decoded image; a view keeps
    the batch's buffer alive, so it may outlive the batch and the loader. ``to_torch(suffix)`` gives (a [len, longest] uint8 tensor padded with
    zeros, an int64 tensor of lengths)."""

    __slots__ = ("_b",)

    def __init__(self, native):
        self._b = native

    def __len__(self):
        return len(self._b)

    @property
    def keys(self):
        """The samples' keys, in batch order: str as os.fsdecode() makes them, so that a name
        that is not UTF-8 (Linux names are bytes) comes back with os.fsencode(key)."""
        return self._b.keys

    @property
    def epoch(self):
        return self._b.epoch

    @property
    def index(self):
        """The batch's number in this rank's whole run (all epochs), from 0."""
        return self._b.index

    @property
    def digest(self):
        """Sum mod 2**64 of XXH3-64 of every member's bytes (adds up to the run's digest)."""
        return self._b.digest

    @property
    def nbytes(self):
        return self._b.nbytes

    @property
    def transformed(self):
        """What the loader's transform= returned for each sample, in batch order ([] without
        one)."""
        return self._b.transformed

    def member(self, suffix=""):
        return self._b.member(_suffix(suffix))

    def labels(self, suffix=".cls"):
        """Each sample's member ending in suffix read as a whole decimal number (WebDataset's
        ``.cls`` convention: ASCII digits, a leading minus, whitespace around), as an int64 numpy
        array in batch order: ``torch.from_numpy(batch.labels())`` is the batch's label tensor
        (to_torch(".cls") gives the members' bytes, not their numbers). A member that is not such
        a number raises ValueError naming the sample."""
        import numpy as np
        views = self.member(suffix)
        out = np.empty(len(views), dtype=np.int64)
        for i, view in enumerate(views):
            text = view.tobytes()
            digits = text.strip(b" \t\r\n")
            number = digits[1:] if digits[:1] == b"-" else digits
            if not number.isdigit() or len(number) > 18:  # bytes.isdigit(): ASCII digits only
                raise ValueError("sample %r: its member %r is not a decimal label: %r" % (
                    self.keys[i], suffix, text[:40]))
            out[i] = int(digits)
        return out

    def padded(self, suffix=""):
        """(numpy uint8 array [len, longest] zero-padded, numpy int64 lengths): one copy."""
        return self._b.padded(_suffix(suffix))

    def dlpack(self, suffix=""):
        """A DLPack capsule of the members ending in suffix as one [len, size] uint8 tensor over
        the batch's buffer (its GPU copy with device=), without a copy; None when the members
        differ in size (padded() then gives one, with a copy). What takes it (torch.from_dlpack)
        keeps the batch alive, and may write to the buffer: DLPack has no read-only tensors."""
        return self._b.dlpack(_suffix(suffix))

    def __dlpack__(self, stream=None):
        """DLPack for a batch whose samples have one member each (files): torch.from_dlpack(b)."""
        capsule = self._b.dlpack("")
        if capsule is None:
            raise BufferError("the batch's samples differ in size: use padded() or to_torch()")
        return capsule

    def __dlpack_device__(self):
        return self._b.dlpack_device()

    def to_torch(self, suffix=""):
        """(uint8 tensor [len, longest], int64 lengths). Members of one size come without a copy
        (a view of the batch's buffer, on the GPU with device=); others are padded (one copy).
        Decoded images of one shape (image_size=) come as [len, height, width, 3] (NHWC; for
        NCHW, ``.permute(0, 3, 1, 2)``), lengths their bytes."""
        import torch  # only when asked for: feedline works without torch
        suffix = _suffix(suffix)
        capsule = self._b.dlpack(suffix)
        if capsule is not None:
            data = torch.utils.dlpack.from_dlpack(capsule)
            nbytes = data[0].numel() if data.shape[0] else 0
            return data, torch.full((data.shape[0],), nbytes, dtype=torch.int64)
        data, lengths = self._b.padded(suffix)
        return torch.from_numpy(data), torch.from_numpy(lengths)

    def __repr__(self):
        return "<feedline.Batch epoch %d index %d: %d samples, %d bytes>" % (
            self.epoch, self.index, len(self), self.nbytes)


# trace=: at most this many events (~170 bytes each), as `feedline run --trace-events`.
_DEFAULT_TRACE_EVENTS = 1_000_000


class Loader:
    """The pipeline over one dataset URL (a directory, file://, s3://, http(s)://, nfs://).

    ``state`` is what ``state_dict()`` returned (or its JSON text): the loader then delivers
    exactly the batches that run had not delivered yet, with the same settings.

    ``transform`` (a callable) runs on each sample on the decode threads, holding the GIL only
    while it runs: it gets a dict of "__key__" and each member's decoded bytes under its name
    after the key, as WebDataset names them (".bin", ".cls"),
    and what it returns is in ``Batch.transformed``, its bytes (an array's or a tensor's
    nbytes) counted in memory_budget until the batch holding it dies: the loader reads ahead only
    as far as the budget holds such results. The transform may not use its own loader (next(),
    report(), close(): RuntimeError). The report's "transform" tells its time,
    and the decode threads' wait for the GIL, apart from feedline's own decode. ``rank`` and
    ``world_size`` default to torch.distributed's when it is initialised, then to the launcher's
    environment (RANK/WORLD_SIZE, Open MPI, SLURM), as `feedline run` reads it. Under
    torch.distributed, rank 0's report() after the pass is the job's (report(): ``job_timeout``
    the seconds it waits for the other ranks' reports).

    ``html`` and ``trace`` (paths) write the run as one self-contained HTML page (the report's
    figures, throughput and queues over time, each stage's busy / starved / blocked, the read
    latency CDF: `feedline run --html`'s page) and as a Chrome trace-event file (open it in
    ui.perfetto.dev: each pipeline thread's spans, the reads, the queues as counters; at most
    ``trace_events`` events, `feedline run --trace`'s), once the pipeline's threads are done: at
    the end of the pass (the loader then closes itself: report() and state_dict() still answer)
    or at close(), also after an error or Ctrl-C. The paths are checked now (ValueError: a
    missing directory, a path inside the dataset, the same file twice); a file that cannot be
    written at the end raises feedline.Error naming it.

    A process fork()ed after the Loader was made cannot use it (RuntimeError: its pipeline's
    threads stay in the parent); it may close it and exit."""

    def __init__(self, url, state=None, transform=None, _start_epoch=0, job_timeout=None,
                 html=None, trace=None, trace_events=None, **options):
        if options.get("rank") is None and options.get("world_size") is None:
            dist = _torch_distributed()
            if dist is not None:
                options["rank"], options["world_size"] = dist
        timeout = _job.job_timeout(job_timeout)
        if isinstance(state, dict):
            state = json.dumps(state)
        elif state is not None and not isinstance(state, str):
            raise TypeError("state must be a dict from state_dict() or its JSON text")
        size = options.get("image_size")
        # Its type and range are the library's to check (below); its pixels, Python's limit.
        if type(size) is int and 1 <= size <= _MAX_IMAGE_SIZE:
            _check_image_size(size, MAX_PIXELS, "feedline.MAX_PIXELS")
        url = _url_bytes(url)
        settings = _settings_args(options)
        html, trace = _output_path("html", html), _output_path("trace", trace)
        trace_events = (_DEFAULT_TRACE_EVENTS if trace_events is None else
                        _whole("trace_events", trace_events, 100, 100_000_000))
        about = json.dumps({"command": "feedline.Loader", "url": os.fsdecode(url)})
        # The library's errors name settings as keywords already (memory_budget, not a flag).
        self._native = _feedline._Loader(url, settings, state, _start_epoch, transform, html,
                                         trace, trace_events, about)
        self._done = False
        # Under torch.distributed (its rank and world size): this loader's part in the job's
        # report (feedline/_job.py).
        self._job = _job.JobReport.for_this_process(options, timeout)

    def __iter__(self):
        return self

    def __len__(self):
        """The batches of one whole epoch on this rank (its share of the samples by the
        equal-batches rule, the last batch short unless drop_last), as a DataLoader's len():
        the steps per epoch for tqdm, an LR schedule or a log. The same for every epoch; a
        resumed epoch delivers only its rest."""
        return self._native.batches_per_epoch

    def __next__(self):
        if self._done:
            raise StopIteration
        b = self._native.next()
        if b is None:
            self._done = True
            if self._job is not None:
                self._job.publish(self.report(own=True))
            raise StopIteration
        return Batch(b)

    @property
    def metrics_url(self):
        """With metrics_port=PORT: where the Prometheus endpoint serves this loader's figures
        while it lives (http://127.0.0.1:PORT/metrics; port 0 picks a free one). None without."""
        return self._native.metrics_url

    def report(self, own=False):
        """The run's report: a dict with the schema of `feedline run --json`. Mid-run it is a
        snapshot ("snapshot": True: the stages, queues, consumer wait and throughput so far; the
        IO statistics and the verdict come at the end) and the run goes on, so a job can log it
        every N steps.

        Under torch.distributed (more than one rank), once the pass has ended (its last batch,
        or close()), rank 0's report is the job's (unless ``own``): the same schema as rank 0's
        `feedline run --json` under mpirun, with "ranks" (every rank's own report, with "rank"
        and "host"), "stragglers" (the slowest rank against the median, and what held it back),
        AU min / mean / max over the ranks, "delivered" summed over them and the MLPerf keys. It
        waits for the other ranks' reports at most ``job_timeout`` seconds (Loader's keyword,
        300 by default) and raises feedline.Error naming a rank whose report did not come (it
        died, or has not ended its pass). The other ranks' report() stays their own."""
        if not own and self._job is not None and self._job.rank == 0 and self._job.published:
            return self._job.job()
        return json.loads(self._native.report_json())

    def state_dict(self):
        """Where this rank's run stands (plain data: JSON-able and picklable)."""
        return json.loads(self._native.state_json())

    def close(self):
        """Stops the pipeline and frees what it holds but the batches still alive, and the
        metrics endpoint; report() still gives the run's report. It does not wait for a
        transform call under way (longer than a moment): the pipeline then ends on its own once
        the call returns, and the report is the run's figures at close()."""
        self._done = True
        self._native.close()
        if self._job is not None:
            self._job.publish(self.report(own=True))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _loader_signature():
    """Loader's signature as help() and inspect show it: every setting a keyword, with its
    default and type."""
    P = inspect.Parameter
    params = [P("self", P.POSITIONAL_OR_KEYWORD), P("url", P.POSITIONAL_OR_KEYWORD),
              P("state", P.POSITIONAL_OR_KEYWORD, default=None),
              P("transform", P.POSITIONAL_OR_KEYWORD, default=None),
              P("job_timeout", P.KEYWORD_ONLY, default=None, annotation=float),
              P("html", P.KEYWORD_ONLY, default=None, annotation=str),
              P("trace", P.KEYWORD_ONLY, default=None, annotation=str),
              P("trace_events", P.KEYWORD_ONLY, default=_DEFAULT_TRACE_EVENTS, annotation=int)]
    for name, setting in _SETTINGS.items():
        params.append(P(name, P.KEYWORD_ONLY, default=_python_default(setting),
                        annotation=_ANNOTATIONS[setting["type"]]))
    return inspect.Signature(params)


def _settings_doc():
    lines = ["", "", "    Settings (keywords; None leaves one at its default):"]
    for name, s in _SETTINGS.items():
        bounds = s["range"] + (" " + s["unit"] if s["unit"] and s["range"] else "")
        lines.append("      %s=%r%s: %s" % (name, _python_default(s),
                                           " (%s)" % bounds if bounds else "", s["help"]))
    return "\n".join(lines)


Loader.__init__.__signature__ = _loader_signature()
Loader.__doc__ += _settings_doc()


# The most pixels one decoded image may have, as Pillow's Image.MAX_IMAGE_PIXELS (beyond it
# Pillow calls the file a decompression bomb): a 12 KB JPEG may claim 65500 x 65500 pixels,
# and image_size=16384 alone makes 805 MB images.
MAX_PIXELS = 89_478_485
_MAX_IMAGE_SIZE = 16384  # the loader's largest image_size (feedline/loader/image.hpp)


def _output_path(name, value):
    """html= or trace=: a path (str, bytes or os.PathLike) as the library takes it, or None."""
    if value is None:
        return None
    if _is_bool(value) or not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError("%s must be a path (str or os.PathLike), not %s"
                        % (name, type(value).__name__))
    return os.fsencode(value)


def _whole(name, value, lo, hi):
    if _is_bool(value):
        raise TypeError("%s must be an int, not bool" % name)
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError("%s must be an int, not %s" % (name, type(value).__name__)) from None
    if not lo <= value <= hi:
        raise ValueError("%s=%d is out of range: %d..%d" % (name, value, lo, hi))
    return value


def _check_image_size(image_size, max_pixels, limit_name):
    size = _whole("image_size", image_size, 1, _MAX_IMAGE_SIZE)
    if size * size > max_pixels:
        raise ValueError("image_size=%d makes images of %d x %d = %d pixels, more than %s=%d "
                         "(Pillow's limit for one image)" % (size, size, size, size * size,
                                                               limit_name, max_pixels))
    return size


def decode_image(data, image_size=None, crop=None, dct_scaling=True, seed=0, sample=0, epoch=0,
                 max_pixels=MAX_PIXELS):
    """One JPEG (bytes) decoded as the loader decodes sample ``sample`` of ``epoch`` with these
    settings (``image_size``, ``crop`` and ``dct_scaling`` as Loader's image_size=, crop= and
    no_dct_scaling=; ``seed`` the run's): (a uint8 numpy array [height, width, 3], a dict of what
    was found and done: the image's size as displayed and as stored, its colour space, EXIF
    orientation, whether progressive, the crop (x, y, width, height) and the DCT scale). To see
    what an augmentation makes of a picture; raises feedline.Error for a file it cannot
    decode, naming why. No image of more than ``max_pixels`` pixels is made or decoded
    (Pillow's limit by default): an image_size beyond it is a ValueError, a file whose
    pixels (or its crop's) are more a feedline.Error."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError("data must be bytes, not %s" % type(data).__name__)
    max_pixels = _whole("max_pixels", max_pixels, 1, 2 ** 40)
    size = 0 if image_size is None else _check_image_size(image_size, max_pixels, "max_pixels")
    if crop is not None and (not isinstance(crop, str) or not crop):
        raise (TypeError if not isinstance(crop, str) else ValueError)(
            "crop must be 'random-resized', 'center' or 'none', not %r" % (crop,))
    seed = _whole("seed", seed, 0, 2 ** 64 - 1)
    sample = _whole("sample", sample, 0, 2 ** 32 - 1)
    epoch = _whole("epoch", epoch, 0, 2 ** 32 - 1)
    return _feedline._decode_image(bytes(data), size, crop or "", bool(dct_scaling), seed,
                                   sample, epoch, max_pixels)


def _torch_distributed():
    """(rank, world size) from torch.distributed when it is initialised, else None. Does not
    import torch when the program has not."""
    import sys
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()
