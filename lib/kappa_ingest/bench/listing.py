"""``kappa-ingest bench --listing``: how long the driver takes to list a prefix of many
objects (10,000 by default) in a local S3 server, the way a run does (its own signed
ListObjectsV2, ETags from the pages), and the way it must where only the AWS SDK finds the
keys (pyarrow's listing, then a HEAD per object), rounds alternating. The objects are put
once and kept in ``data/`` between runs."""

from __future__ import annotations

import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from kappa_ingest.bench import store
from kappa_ingest.s3 import listing
from kappa_ingest.s3.access import S3Access

BUCKET = "listing"
TARGET_S = 5.0  # "a few seconds"


def run_listing(out: Path, data: Path, objects: int, repeats: int, command: str) -> dict:
    state = data / f"s3-listing-{objects}"
    served = store.start(state)
    try:
        os.environ.update(store.environment(served))
        access = S3Access(served.endpoint)
        prefix = f"s3://{BUCKET}/{objects}/"
        _fill(access, objects)
        rounds: dict[str, list[float]] = {"signed": [], "pyarrow+HEAD": []}
        for _ in range(repeats):
            for way in rounds:
                began = time.perf_counter()
                found = listing.list_objects(prefix, access, signed=way == "signed")
                rounds[way].append(time.perf_counter() - began)
                if len(found) != objects:
                    raise AssertionError(f"{way} listed {len(found)} of {objects} objects")
    finally:
        served.stop()
    results = {"command": command, "objects": objects, "seconds": rounds, "target_s": TARGET_S,
               "median_s": {w: statistics.median(t) for w, t in rounds.items()}}  # fmt: skip
    results["met"] = results["median_s"]["signed"] <= TARGET_S
    folder = out / f"listing-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    for way, times in rounds.items():
        print(
            f"{objects:,} objects, {way}: median {statistics.median(times):.2f} s ({', '.join(f'{t:.2f}' for t in times)})"
        )
    verdict = "met" if results["met"] else "NOT met"
    print(f"target: listed in {TARGET_S:g} s or less: {verdict}; {folder}/results.json")
    return results


def _fill(access: S3Access, objects: int) -> None:
    """The prefix's objects, put through the S3 API where they are not already there."""
    from pyarrow import fs

    filesystem = access.filesystem(create_buckets=True)
    if filesystem.get_file_info(BUCKET).type == fs.FileType.NotFound:
        filesystem.create_dir(BUCKET)
    there = {i.path for i in filesystem.get_file_info(fs.FileSelector(f"{BUCKET}/{objects}", allow_not_found=True))}
    body = b"id,name\n1,a\n"

    def put(i: int) -> None:
        path = f"{BUCKET}/{objects}/part-{i:06d}.csv"
        if path not in there:
            with filesystem.open_output_stream(path, compression=None) as o:
                o.write(body)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(objects)))
