"""Where the built-in jobs' batches come from: the `data` axis (`ckpt_harness.job.axes`).

Three sources of one dataset (64 samples, a fixed shard per rank), each with
the state a resume must restore and nothing else:

- `stream`: `SyntheticStream`, whose only state is a position.
- `shuffled`: a `DataLoader` over a `RandomSampler` with its own generator,
  no workers. Resumed mid-epoch by the generator's state at the epoch's start
  and the batches consumed (what a careful trainer saves; restoring the
  position alone replays another permutation).
- `workers`: torchdata's `StatefulDataLoader`, 2 persistent worker
  processes, shuffled, resumed by its own `state_dict`.

Each loader is handed a generator of its own, also as the `DataLoader`'s:
an iterator draws its workers' base seed from the loader's generator, or
from the global torch RNG when it has none, and a resume that starts a new
iterator would then shift the dropout stream. Input noise draws from numpy's
global RNG in the training process (not in a worker), so losing the numpy
state on resume changes the training as it does with the stream.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

import numpy as np
import torch

IN_DIM, OUT_DIM = 8, 4
BATCH_SIZE = 8
N_SAMPLES = 64
#: Worker processes of the `workers` source (persistent).
WORKERS = 2


class Data(Protocol):
    """What a built-in job asks of its batches' source."""

    #: Batches handed out since the start of training (what `state` shows as data/position).
    position: int

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

    def skip_to(self, position: int) -> None:
        """Resume at `position` with no state of this rank (a checkpoint of another world size)."""

    def close(self) -> None: ...


def _samples(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N_SAMPLES, IN_DIM, generator=g)
    return x, torch.tanh(x @ torch.randn(IN_DIM, OUT_DIM, generator=g))


def _noisy(x: torch.Tensor) -> torch.Tensor:
    noise = torch.from_numpy(np.random.standard_normal(tuple(x.shape)).astype(np.float32))
    return x + 0.01 * noise


class SyntheticStream:
    """A sharded, reshuffled-per-epoch stream whose only state is `position`.

    The order is a pure function of (seed, epoch), so restoring `position`
    is both necessary and sufficient to resume the data exactly; the input
    noise draws from numpy's global RNG so that losing the numpy state on
    resume changes the training too.
    """

    def __init__(self, seed: int, rank: int, world_size: int) -> None:
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.x, self.y = _samples(seed)
        self.batches_per_epoch = max(1, N_SAMPLES // (BATCH_SIZE * world_size))
        self.position = 0

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        epoch, i = divmod(self.position, self.batches_per_epoch)
        order = torch.randperm(
            N_SAMPLES, generator=torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        )
        start = ((i * self.world_size + self.rank) * BATCH_SIZE) % N_SAMPLES
        idx = order[start : start + BATCH_SIZE]
        self.position += 1
        return _noisy(self.x[idx]), self.y[idx]

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.position = int(state["position"])

    def skip_to(self, position: int) -> None:
        self.position = position

    def close(self) -> None:
        pass


class _Loader:
    """A loader over this rank's shard, iterated epoch after epoch."""

    def __init__(self, seed: int, rank: int, world_size: int) -> None:
        x, y = _samples(seed)
        shard = slice(rank, None, world_size)
        self.dataset = torch.utils.data.TensorDataset(x[shard], y[shard])
        self.generator = torch.Generator().manual_seed(seed * 1_000_003 + rank)
        self.position = 0
        self.loader = self._make()
        self._it: Any = None

    def _make(self) -> Any:
        raise NotImplementedError

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._it is None:
            self._start_epoch()
        try:
            x, y = next(self._it)
        except StopIteration:
            self._start_epoch()
            x, y = next(self._it)
        self.position += 1
        return _noisy(x), y

    def _start_epoch(self) -> None:
        self._it = iter(self.loader)

    def skip_to(self, position: int) -> None:
        for _ in range(position):
            self.next_batch()

    def close(self) -> None:
        self._it = None


class ShuffledLoader(_Loader):
    """`data = "shuffled"`: a `RandomSampler` with its own generator, resumed mid-epoch.

    The sampler draws its epoch's permutation when the epoch's first batch is
    asked for; the generator's state just before that draw, and the batches
    consumed since, resume the epoch exactly: restore the state, start an
    epoch, skip the batches."""

    def _make(self) -> Any:
        sampler = torch.utils.data.RandomSampler(self.dataset, generator=self.generator)
        self.epoch_start = self.generator.get_state()
        self.in_epoch = 0
        return torch.utils.data.DataLoader(self.dataset, batch_size=BATCH_SIZE, sampler=sampler, drop_last=True,
                                           generator=self.generator)

    def _start_epoch(self) -> None:
        self.epoch_start = self.generator.get_state()
        self.in_epoch = 0
        super()._start_epoch()

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        batch = super().next_batch()
        self.in_epoch += 1
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "epoch_start": self.epoch_start.clone(), "in_epoch": self.in_epoch,
                "started": self._it is not None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.generator.set_state(state["epoch_start"])
        self._it = None
        if state["started"]:
            super()._start_epoch()  # from the saved epoch's start, which the state already is
            self.epoch_start = state["epoch_start"].clone()
            for _ in range(int(state["in_epoch"])):
                next(self._it)
        self.in_epoch = int(state["in_epoch"])
        self.position = int(state["position"])


class WorkersLoader(_Loader):
    """`data = "workers"`: torchdata's `StatefulDataLoader`, shuffled, with
    persistent worker processes (forked from the rank), resumed by its own
    `state_dict` as torchdata documents it."""

    def _make(self) -> Any:
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(self.dataset, batch_size=BATCH_SIZE, shuffle=True, drop_last=True,
                                  generator=self.generator, num_workers=WORKERS, persistent_workers=True,
                                  multiprocessing_context="fork")

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "loader": self.loader.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.loader.load_state_dict(state["loader"])
        self._it = None
        self.position = int(state["position"])

    def close(self) -> None:
        """Stop the workers now, not when the loader is collected."""
        it = self.loader._iterator
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
        self.loader._iterator = None
        super().close()


SOURCES = {"stream": SyntheticStream, "shuffled": ShuffledLoader, "workers": WorkersLoader}


def build_data(kind: str, seed: int, rank: int, world_size: int) -> Data:
    """The batches' source the `data` axis names."""
    return SOURCES[kind](seed, rank, world_size)
