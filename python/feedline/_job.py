"""One report for a torch.distributed job: at the end of a pass (or close()) every rank puts its
own report in the store its process group already has (no second rendezvous, no port of
feedline's own); rank 0's report() waits for the others' (at most ``job_timeout`` seconds) and
returns the job's document, which feedline's library makes as rank 0 of an mpirun job does: a
``ranks`` list, ``stragglers``, AU min / mean / max over the ranks, ``delivered`` summed, the
MLPerf keys. A rank that died, or never ends its pass, is named in an error after the timeout.

The n-th loader a rank makes meets the n-th of every other rank: the ranks must make their
loaders alike (one per pass, as feedline.torch.IterableDataset does).
"""
import datetime
import json
import socket
import sys
import time

from . import _feedline

DEFAULT_TIMEOUT = 300.0  # seconds rank 0 waits for the others' reports, by default
_loaders_made = 0  # this process's loaders under torch.distributed, in the order it made them


def job_timeout(value):
    """The ``job_timeout=`` keyword, checked: seconds > 0 (None: the default)."""
    if value is None:
        return DEFAULT_TIMEOUT
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError("job_timeout must be a number of seconds > 0, not %r" % (value,))
    return float(value)


class JobReport:
    """A loader's part in its job's report: made with the loader, on every rank."""

    def __init__(self, rank, world_size, timeout):
        global _loaders_made
        import torch.distributed as dist
        self._store = dist.distributed_c10d._get_default_store()
        self.rank, self.world_size, self._timeout = rank, world_size, timeout
        self._prefix = "feedline/job-report/%d/" % _loaders_made
        _loaders_made += 1
        self._published = False
        self._job = None

    @staticmethod
    def for_this_process(options, timeout):
        """A JobReport when torch.distributed is initialised with more than one rank and the
        loader's rank and world size are the process group's; else None."""
        torch = sys.modules.get("torch")
        dist = getattr(torch, "distributed", None) if torch is not None else None
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        rank, world = dist.get_rank(), dist.get_world_size()
        if world < 2 or options.get("rank") != rank or options.get("world_size") != world:
            return None
        return JobReport(rank, world, timeout)

    @property
    def published(self):
        return self._published

    def publish(self, report):
        """Puts this rank's final report where rank 0 finds it (once)."""
        if self._published:
            return
        doc = dict(report, rank=self.rank, host=socket.gethostname())
        self._store.set(self._prefix + str(self.rank), json.dumps(doc))
        self._published = True

    def job(self):
        """Rank 0: the job's document, once every rank's report is in (made once). Raises
        feedline.Error naming the ranks whose report did not come within the timeout."""
        if self._job is None:
            docs = self._gather()
            ranks = [json.loads(d) for d in docs]
            hosts = len({r.get("host") for r in ranks})
            au_target = max((r.get("au_target") or 0 for r in ranks), default=0)
            emulated = any(r.get("au") is not None for r in ranks)
            self._job = json.loads(_feedline._job_report_json(docs, hosts, au_target, emulated))
            self._job["torch_distributed"] = {"ranks": self.world_size, "hosts": hosts}
        return self._job

    def _gather(self):
        deadline = time.monotonic() + self._timeout
        missing = []
        for r in range(self.world_size):
            left = max(0.001, deadline - time.monotonic())
            try:
                self._store.wait([self._prefix + str(r)], datetime.timedelta(seconds=left))
            except RuntimeError:  # the store's timeout
                missing.append(r)
        if missing:
            from . import Error
            raise Error("the job's report: rank%s %s of %d sent no report within job_timeout=%gs "
                        "(it died, or has not ended its pass): rank 0 has the others'" % (
                            "s" if len(missing) > 1 else "", ", ".join(map(str, missing)),
                            self.world_size, self._timeout))
        return [self._store.get(self._prefix + str(r)).decode() for r in range(self.world_size)]
