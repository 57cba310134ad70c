"""The node's one-time builds give what their straightforward versions gave, bit for bit: the
bucket index (``build_bucket_index``: a length table and histogram, a counting sort per chunk,
file ids by ranges) against the per-sequence binary search and per-bucket loop it replaced; tag
hashes (eight bytes at a time, by runs or gathered) against their definition one tag at a time;
the duplicate-tag screen against a plain dict of tags."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.test_kept_tag_hashes import reference_hash

from seqloader.errors import SequenceTooLongError
from seqloader.parts import part_of
from seqloader.plan.indexed import histogram
from seqloader.plan.indexed.histogram import BucketIndex, build_bucket_index
from seqloader.sources import tag_hash
from seqloader.sources.hdf_layout import PackedTags
from seqloader.trainer.checks import duplicate_tags


def reference_index(
    lengths: np.ndarray,
    edges: np.ndarray,
    admitted: np.ndarray | None = None,
    files: np.ndarray | None = None,
) -> BucketIndex:
    """The index by definition: a stable sort of the admitted sequences by bucket (binary
    search of each length among the edges), one sequence at a time for the file tables."""
    n, n_buckets = len(lengths), len(edges) + 1
    part = np.searchsorted(edges, lengths, side="right")
    keep = np.ones(n, bool) if admitted is None else admitted.astype(bool)
    ids = np.flatnonzero(keep)
    order = ids[np.argsort(part[ids], kind="stable")]
    counts = np.bincount(part[ids], minlength=n_buckets)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    longest = np.zeros(n_buckets, np.int64)
    for b in range(n_buckets):
        in_b = order[starts[b] : starts[b + 1]]
        longest[b] = int(lengths[in_b].max()) if len(in_b) else 0
    table = frames = None
    if files is not None:
        n_files = len(files) - 1
        table = np.zeros((n_files, n_buckets), np.int64)
        frames = np.zeros(n_files, np.int64)
        for i in ids.tolist():
            f = int(part_of(files, i))
            table[f, part[i]] += 1
            frames[f] += int(lengths[i])
        if int(table.max(initial=0)) < 2**31:
            table = table.astype(np.int32)
    members = order.astype(np.uint32 if n < 2**32 else np.int64)
    return BucketIndex(members, starts, longest, np.asarray(edges, np.int64), table, frames)


def assert_same(got: BucketIndex, want: BucketIndex) -> None:
    a, b = got.columns(), want.columns()
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert np.array_equal(a[name], b[name]), name


@st.composite
def corpora(draw):
    n = draw(st.integers(1, 300))
    long = draw(st.booleans())  # lengths past the table's reach: the binary-search path
    top = (1 << 23) if long else draw(st.integers(1, 3000))
    lengths = np.array(draw(st.lists(st.integers(0, top), min_size=n, max_size=n)))
    lengths = lengths.astype(draw(st.sampled_from([np.int32, np.int64])))
    edges = np.unique(draw(st.lists(st.integers(1, top), max_size=12))).astype(np.int64)
    admitted = None
    if draw(st.booleans()):
        admitted = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    files = None
    if draw(st.booleans()):
        cuts = draw(st.lists(st.integers(0, n), max_size=8))  # empty files allowed
        files = np.array(sorted([0, n, *cuts]), dtype=np.int64)
    return lengths, edges, admitted, files


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corpus=corpora(), chunk=st.sampled_from([1, 7, 64, 1 << 22]))
def test_bucket_index_equals_its_definition(corpus, chunk):
    lengths, edges, admitted, files = corpus
    old = histogram._CHUNK
    histogram._CHUNK = chunk  # several chunks, a file split over chunks
    try:
        got = build_bucket_index(lengths, edges, admitted, files)
    finally:
        histogram._CHUNK = old
    assert_same(got, reference_index(lengths, edges, admitted, files))


def test_bucket_index_of_a_memory_mapped_int32_view(tmp_path):
    lengths = np.random.default_rng(0).integers(50, 2001, 10_000).astype(np.int32)
    path = tmp_path / "lengths.npy"
    np.save(path, lengths)
    mapped = np.load(path, mmap_mode="r")
    edges = np.array([100, 400, 900, 1500])
    files = np.array([0, 10, 10, 5_000, 10_000])
    assert_same(
        build_bucket_index(mapped, edges, None, files), reference_index(lengths, edges, None, files)
    )


@settings(max_examples=120, deadline=None)
@given(
    tags=st.lists(st.text(alphabet=st.sampled_from("ab/é0 \u4e2d"), max_size=40), max_size=40),
    width=st.integers(0, 20),
    run=st.integers(0, 40),
    skip=st.integers(0, 3),
    block=st.sampled_from([1, 5, 64, 1 << 15]),
    run_rows=st.sampled_from([1, 1 << 30]),
)
def test_tag_hashes_equal_their_definition(tags, width, run, skip, block, run_rows):
    """Property: every tag's hash is its definition (``reference_hash``), whether the tags are
    hashed run by run of one length (strided words; ``RUN_ROWS`` 1) or word by word gathered
    (``RUN_ROWS`` huge), in chunks of any size, with a run of ids of one width among them and
    the offsets starting anywhere in the buffer (the last tag's words end at the buffer's end)."""
    ids = [f"{i:0{width}d}"[-width:] if width else "" for i in range(run)]
    whole = PackedTags.from_strings(tags + ids)
    data, offsets = whole.buffers()
    packed = PackedTags(data, offsets[min(skip, len(offsets) - 1) :])
    want = [reference_hash(packed.raw(i)) for i in range(len(packed))]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tag_hash, "RUN_ROWS", run_rows)
        assert packed.hashes(block).tolist() == want


@pytest.mark.parametrize("width", [3, 12])
def test_tag_hashes_hold_chunks_not_copies_of_every_tag(width):
    """Runs of tags of one width, shorter than a word (padded to 8 bytes) or not, are hashed
    ``chunk`` tags at a time: the peak traced memory is the hashes and the tags' lengths (8 bytes
    each per tag), the runs' boundaries (2 bytes) and chunk-sized temporaries. A run of short ids (``seg001``, say) at 10^8 held
    a padded copy of every tag and fmix64's temporaries of every hash at once (4x the hashes)."""
    n, chunk = 1 << 16, 256
    data = np.frombuffer(b"".join(b"%0*d" % (width, i) for i in range(n)), np.uint8)
    offsets = np.arange(n + 1, dtype=np.int64) * width
    tracemalloc.start()
    try:
        hashes = tag_hash.tag_hashes(data, offsets, chunk)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert hashes.tolist()[:3] == [reference_hash(b"%0*d" % (width, i)) for i in range(3)]
    assert peak <= 18 * n + 16 * chunk * 8, peak


@settings(max_examples=100, deadline=None)
@given(
    tags=st.lists(st.text(alphabet=st.sampled_from("ab/é0"), max_size=4), max_size=80),
)
def test_duplicate_screen_equals_a_plain_dict(tags):
    want: dict[str, list[int]] = {}
    for i, t in enumerate(tags):
        want.setdefault(t, []).append(i)
    repeated = sorted((idx for idx in want.values() if len(idx) > 1), key=lambda idx: idx[1])
    want = {tags[idx[0]]: idx for idx in repeated}  # in the order the repeats are met
    got = duplicate_tags(PackedTags.from_strings(tags))
    assert got == want and list(got) == list(want)


def test_duplicate_screen_finds_hash_collisions_only_by_tag(monkeypatch):
    """Tags whose hashes collide but which differ are no duplicates."""
    tags = PackedTags.from_strings(["a", "b", "c", "a"])
    monkeypatch.setattr(PackedTags, "hashes", lambda self: np.zeros(len(self), np.uint64))
    assert duplicate_tags(tags) == {"a": [0, 3]}


@pytest.mark.parametrize("n", [0, 1])
def test_tiny(n):
    lengths = np.arange(n, dtype=np.int32)
    assert_same(build_bucket_index(lengths, np.array([1])), reference_index(lengths, np.array([1])))
    assert PackedTags.from_strings(["x"] * n).hashes().shape == (n,)


# ---- the bucket index file's key ----
INDEX_OPTIONS = st.fixed_dictionaries(
    {
        "ordering": st.sampled_from(["laplace", "laplace:.50", "buckets:3", "buckets:8"]),
        "max_seqs": st.sampled_from([None, 4, 16]),
        "max_frames": st.sampled_from([None, 400, 1000]),
        "max_seq_length": st.sampled_from([None, 80]),
        "min_seq_length": st.sampled_from([0, 5]),
        "partition_epoch": st.sampled_from([1, 3]),
        "uneven": st.sampled_from(["split", "pad"]),
        "seed": st.sampled_from([1, 2]),
        "batch_cost": st.sampled_from(["frames", "quadratic:100"]),
        "distribution": st.sampled_from(["shard", "files"]),
    }
)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 120), min_size=1, max_size=300),
    a=INDEX_OPTIONS,
    b=INDEX_OPTIONS,
)
def test_options_with_one_index_key_build_one_index(lengths, a, b):
    """Plans whose options give one ``index_key`` (the node's index file) build bit-identical
    bucket indexes, so sharing the file never hands a plan another plan's index."""
    from seqloader.plan import PlanOptions
    from seqloader.plan.indexed.planner import IndexedPlanner, index_key

    b = {
        **b,
        **{k: a[k] for k in ("max_seq_length", "min_seq_length", "batch_cost", "distribution")},
    }
    opts = [PlanOptions(planning="indexed", **o) for o in (a, b)]
    if index_key(opts[0]) != index_key(opts[1]):
        return
    arr = np.asarray(lengths, dtype=np.int32)
    files = np.array([0, len(arr) // 2, len(arr)], dtype=np.int64)
    built = []
    for o in opts:
        try:
            planner = IndexedPlanner({"data": arr}, o, files=files)
        except SequenceTooLongError:  # fits no batch under these limits: refused before the index
            built.append(None)
            continue
        built.append(
            {k: v.tobytes() + str(v.dtype).encode() for k, v in planner.index.columns().items()}
        )
    if None not in built:
        assert built[0] == built[1]


def test_index_key_follows_what_the_index_depends_on():
    from seqloader.plan import PlanOptions
    from seqloader.plan.indexed.planner import index_key

    base = PlanOptions(ordering="buckets:30", max_frames=20_000, planning="indexed")
    same = [
        {"seed": 9}, {"partition_epoch": 4}, {"uneven": "pad"}, {"ordering": "buckets:30:2"},
    ]  # fmt: skip
    other = [
        {"max_frames": 500}, {"max_seqs": 3},  # the edges follow the batch sizes
        {"ordering": "buckets:10"}, {"ordering": "laplace"}, {"max_seq_length": 900},
        {"min_seq_length": 3}, {"batch_cost": "quadratic:500"}, {"distribution": "files"},
        {"length_key": "data"},
    ]  # fmt: skip
    from dataclasses import replace

    for change in same:
        assert index_key(replace(base, **change)) == index_key(base), change
    for change in other:
        assert index_key(replace(base, **change)) != index_key(base), change


# ---- an HDF file's tags, read in blocks ----
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tags=st.lists(
        st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=6),
        min_size=1,
        max_size=12,
    ),
    block=st.integers(1, 5),
    style=st.sampled_from(["datasetwriter", "simplewriter"]),
)
def test_hdf_tags_read_in_blocks_are_the_files_tags(tmp_path, monkeypatch, tags, block, style):
    """``seqTags`` read ``TAG_BLOCK`` rows at a time (fixed-length ``S<n>`` and variable-length
    tags, as RETURNN's two writers store them) give every tag of the file, in order, and the
    same metadata store (fingerprint) as one read of the whole dataset."""
    from tests.hdf_files import write_datasetwriter_style, write_simplewriter_style

    from seqloader.sources import hdf_layout
    from seqloader.sources.hdf import HDFSource

    path = str(tmp_path / f"{style}-{block}-{abs(hash(tuple(tags)))}.hdf")
    inputs = [np.zeros((1 + i % 2, 1), np.float32) for i in range(len(tags))]
    if style == "datasetwriter":
        write_datasetwriter_style(path, tags, inputs=inputs)
    else:
        write_simplewriter_style(path, tags, inputs)
    whole = HDFSource(path, index_dir=str(tmp_path / f"whole-{block}"))
    monkeypatch.setattr(hdf_layout, "TAG_BLOCK", block)
    blocks = HDFSource(path, index_dir=str(tmp_path / f"blocks-{block}"))
    assert [blocks.tag(i) for i in range(len(tags))] == tags
    assert blocks.fingerprint() == whole.fingerprint()
    whole.close()
    blocks.close()


@pytest.mark.parametrize(
    "options, read",
    [
        ({"ordering": "buckets:30"}, set()),  # what `seqloader prepare` builds at 10^8
        ({"ordering": "laplace"}, set()),
        ({"ordering": "random"}, set()),
        ({"ordering": "default"}, {"bucket.cuts", "bucket.cut_starts"}),
        ({"ordering": "sort_bin_shuffle"}, set()),
        (
            {"ordering": "laplace", "distribution": "files"},
            {"bucket.file_counts", "bucket.file_frames"},
        ),
    ],
)
def test_node_index_holds_what_its_options_read(options, read):
    """The node's index file holds the four bucket columns and only the extra columns its
    options' planning reads (no sorted or per-file table built for options that never read it:
    the index is written and fsynced once per node, 4 bytes per sequence per column)."""
    from seqloader.plan import PlanOptions
    from seqloader.plan.planners import node_bucket_index

    lengths = {"data": np.random.default_rng(0).integers(5, 400, 3000).astype(np.int32)}
    opts = PlanOptions(planning="indexed", max_frames=2000, max_seqs=40, **options)
    files = np.array([0, 1000, 2000, 3000], dtype=np.int64)
    columns = node_bucket_index(lengths, opts, files=files).columns()
    assert (
        set(columns) == {"bucket.members", "bucket.starts", "bucket.longest", "bucket.edges"} | read
    )
    assert len(columns["bucket.members"]) == 3000  # every sequence admitted, each once
    assert np.array_equal(np.sort(columns["bucket.members"]), np.arange(3000))
