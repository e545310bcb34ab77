"""A watch batch's small files packed into tasks of as many files as make the batch
shortest: no last task running alone while the other cores idle (a 250-file batch of the
backlog bench was 17 tasks on 2 cores at Spark's own open cost), none of more files than
``ingest`` or Spark's own packs. The packing is Spark's own, simulated, and checked against a
real Spark scan."""

from __future__ import annotations

import random

import pytest

from kappa_ingest.source import splits
from kappa_ingest.source.splits import (
    INCREMENTAL_SPLIT_BYTES,
    OPEN_COST_BYTES,
    ingest_packing,
    spark_packing,
    waves_open_cost,
)


def _tasks(sizes: list[int], cores: int) -> list[int]:
    return spark_packing(sizes, INCREMENTAL_SPLIT_BYTES, waves_open_cost(sizes, INCREMENTAL_SPLIT_BYTES, cores))


def _time(tasks: list[int], cores: int) -> int:
    return -(-len(tasks) // cores) * (max(tasks) + splits.TASK_COST_FILES)


def test_spark_own_open_cost_leaves_a_task_alone_in_the_last_wave_and_the_chosen_one_does_not():
    sizes = [432_000] * 250  # the backlog bench's files: 1,000 rows of debs2012
    assert len(spark_packing(sizes, INCREMENTAL_SPLIT_BYTES, OPEN_COST_BYTES)) == 17
    assert _tasks(sizes, 2) == [25] * 10  # ingest packs these files 29 a task: 10 tasks fill 5 waves


@pytest.mark.parametrize("files", [1, 5, 17, 63, 250, 999])
@pytest.mark.parametrize("cores", [2, 8])
@pytest.mark.parametrize("size", [100_000, 432_000, 2_000_000, 100 << 20])
def test_a_batch_is_never_longer_than_at_spark_own_open_cost_nor_its_tasks_larger_than_ingest_s(files, cores, size):
    rnd = random.Random(files * cores)
    sizes = [rnd.randint(size * 7 // 10, size * 13 // 10) for _ in range(files)]
    tasks = _tasks(sizes, cores)
    usual = spark_packing(sizes, INCREMENTAL_SPLIT_BYTES, OPEN_COST_BYTES)
    assert sum(tasks) == files and max(tasks) <= max(*ingest_packing(sizes, cores), *usual)
    assert _time(tasks, cores) <= _time(usual, cores)


@pytest.mark.parametrize("seed", range(300))
def test_files_of_very_different_sizes_are_never_slower_than_at_spark_own_open_cost(seed):
    """(With the cap of ``ingest``'s packing alone, one 60 MB file beside 16 small ones
    went as 17 tasks of one file, and three of 5 MB as three tasks on two cores.)"""
    rnd = random.Random(seed)
    sizes = [rnd.choice([rnd.randint(1, 200_000), rnd.randint(1 << 20, 60 << 20)]) for _ in range(rnd.randint(1, 40))]
    cores = rnd.choice([1, 2, 4, 16])
    usual = spark_packing(sizes, INCREMENTAL_SPLIT_BYTES, OPEN_COST_BYTES)
    assert _time(_tasks(sizes, cores), cores) <= _time(usual, cores)
    assert _time(_tasks([60 << 20] + [100_000] * 16, 2), 2) <= _time([1, 16], 2)


def test_a_few_files_are_spread_over_the_cores():
    assert _tasks([432_000] * 5, 2) == [3, 2]
    assert _tasks([432_000], 2) == [1]


def test_spark_packs_as_simulated(spark, tmp_path):
    """A real scan of files of uneven sizes: as many tasks as the simulation says, at the
    open cost chosen and at Spark's own (small files: the split size scaled down with them)."""
    rnd = random.Random(7)
    sizes = [rnd.randint(300, 600) for _ in range(90)]
    for i, n in enumerate(sizes):
        (tmp_path / f"{i:03d}.csv").write_bytes(b"x" * (n - 1) + b"\n")
    split = 8_000
    paths = [str(tmp_path / f"{i:03d}.csv") for i in range(len(sizes))]
    for cost in (waves_open_cost(sizes, split, 2), split // 20, 0):
        for key, value in splits.spark_conf(split, cost, local=True).items():
            spark.conf.set(key, value)
        scanned = spark.read.text(paths)._jdf.rdd().getNumPartitions()
        assert scanned == len(spark_packing(sizes, split, cost)), cost
