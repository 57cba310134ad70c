"""One rank of a process group loading a RETURNN config's train dataset with seqloader, run by
``tests/test_returnn_distrib_files.py`` as a launch of ``launch_fork.py``:

    python tests/dist/launch_fork.py 2 --script returnn_config_rank CONFIG OUT EPOCH...

The rank joins the gloo group (``dist.init_process_group``, as a training script would), runs the
sub-epochs given with the audit on and writes each one's batches (tags), its dropped count and the
audit to ``OUT/result.RANK.json``.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch.distributed as dist

import seqloader as sl
from seqloader.returnn.config import returnn_datasets


def main(argv: list[str]) -> int:
    config, out, *epochs = argv
    dist.init_process_group("gloo")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = returnn_datasets(config, only="train")["train"]
    result = {}
    with sl.SeqLoader(d.source, plan=d.plan, workers=d.workers, audit=True) as loader:
        for epoch in map(int, epochs):
            tags = [list(b.seq_tags) for b in loader.epoch(epoch)]
            report = loader.report()
            result[epoch] = {
                "tags": tags,
                "dropped": report.dropped,
                "audit": report.audit.to_dict(),
            }
    (Path(out) / f"result.{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
