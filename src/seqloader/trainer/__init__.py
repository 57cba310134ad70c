"""What ``SeqLoader`` keeps in the trainer process around torch, without torch: its options
(``loader_options``), the data checks (``checks``), the epoch report and its meter (``report``,
``corpus_report``), the exactly-once audit (``audit``), the remote files' prefetcher
(``prefetch``) and the thread that frees batches the loop is done with (``release``).

Torch-free, so ``seqloader check``/``stats`` and the torch-free layers can use them; the torch
glue (``seqloader.torch``) drives them.
"""
