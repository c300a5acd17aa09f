"""The name `accel launch`'s agents give each rendezvous round (rank_grace.round_name), which the workers' process
group keys carry: the same on every machine of a round, whichever agent asks first, and new in the next round."""

from __future__ import annotations

import threading
from datetime import timedelta

import torch.distributed as dist

from accel.cli.launch.rank_grace import round_name


def test_every_machine_of_a_round_reads_the_name_machine_0_drew_and_the_next_round_has_another() -> None:
    store = dist.HashStore()
    store.set_timeout(timedelta(seconds=30))
    first_round = dist.PrefixStore("torch.rendezvous.accel.1", store)  # torch's per-round prefix under c10d
    early: list[str] = []
    reader = threading.Thread(target=lambda: early.append(round_name(first_round, 1)))
    reader.start()  # machine 1's agent asks before machine 0's has drawn the name: it waits for it
    drawn = round_name(first_round, 0)
    reader.join(timeout=30)
    assert early == [drawn] and len(drawn) == 32 and round_name(first_round, 2) == drawn

    second_round = dist.PrefixStore("torch.rendezvous.accel.2", store)
    redrawn = round_name(second_round, 0)
    assert redrawn != drawn and round_name(second_round, 1) == redrawn
