"""The ``seqloader`` command line: demo, bench, check, stats, convert.

A thin layer: every command parses arguments, calls the library (``seqloader.cli.config`` to open
DATA, ``seqloader.plan.simulate`` to simulate ranks, ``SeqLoader`` to load) and formats the result as
text or ``--json``. See docs/cli.md.
"""
