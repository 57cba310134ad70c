"""``ZipSource`` and ``ConcatSource`` on real RETURNN-format HDF files: the join against RETURNN's
own ``MetaDataset``, the vectorised tag join against a dict, bad input (missing tags, key
mismatches, empty corpora), and lazy opening."""

from __future__ import annotations

import pickle
import warnings

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.errors import DataError, DataWarning, OptionError
from seqloader.sources.concat import ConcatSource
from seqloader.sources.hdf_layout import PackedTags
from seqloader.sources.joined import ZipSource
from seqloader.sources.tag_join import DuplicateTagError, join

RNG = np.random.default_rng(7)
DATA_MAP = {"data": ("feat", "data"), "classes": ("align", "data")}


def feats(lens, dim: int = 5) -> list[np.ndarray]:
    return [RNG.standard_normal((int(n), dim)).astype(np.float32) for n in lens]


def labels(lens, vocab: int) -> list[np.ndarray]:
    return [RNG.integers(0, vocab, int(n)).astype(np.int32) for n in lens]


def write_returnn_alignments(path: str, alignments: dict[str, np.ndarray], vocab: int) -> None:
    """Alignments written by RETURNN's own ``SimpleHDFWriter`` (sparse ``data``), in the given
    tag order."""
    hdf = pytest.importorskip("returnn.datasets.hdf")
    writer = hdf.SimpleHDFWriter(path, dim=vocab, ndim=1)
    for tag, a in alignments.items():
        writer.insert_batch(a[None, :], [len(a)], [tag])
    writer.close()


@pytest.fixture
def feat_align(tmp_path):
    """Features (write_hdf) for 24 tags; alignments (RETURNN's writer) for the same tags shuffled
    plus 3 tags without features."""
    tags = [f"corpus/rec{i}/seg{i % 5}" for i in range(24)]
    feat = sl.MemorySource({"data": feats(RNG.integers(1, 30, 24))}, tags)
    feat_path = str(tmp_path / "feat.hdf")
    sl.write_hdf(feat_path, feat)
    align_tags = [tags[i] for i in RNG.permutation(24)] + ["extra/0", "extra/1", "extra/2"]
    alignments = {t: labels([RNG.integers(1, 12)], 9)[0] for t in align_tags}
    align_path = str(tmp_path / "align.hdf")
    write_returnn_alignments(align_path, alignments, 9)
    return feat_path, align_path, tags, alignments


def test_zip_joins_like_returnn_metadataset(feat_align):
    """Same arrays per tag as RETURNN's MetaDataset with the same data_map and control."""
    meta = pytest.importorskip("returnn.datasets.meta")
    pytest.importorskip("tree")
    feat_path, align_path, tags, _ = feat_align
    ds = meta.MetaDataset(
        datasets={
            "feat": {"class": "HDFDataset", "files": [feat_path]},
            "align": {"class": "HDFDataset", "files": [align_path]},
        },
        data_map=DATA_MAP,
        seq_order_control_dataset="feat",
    )
    ds.initialize()
    ds.init_seq_order(epoch=1)
    zipped = ZipSource(
        {"feat": sl.HDFSource(feat_path), "align": sl.HDFSource(align_path)},
        data_map=DATA_MAP,
        control="feat",
    )
    assert len(zipped) == ds.num_seqs == 24
    assert list(zipped.tags) == tags  # the control's tags, in the control's order
    assert zipped.schema["classes"].sparse and zipped.schema["classes"].vocab_size == 9
    position = {t: i for i, t in enumerate(zipped.tags)}
    for i in range(ds.num_seqs):
        ds.load_seqs(i, i + 1)
        ours = zipped.read(position[ds.get_tag(i)])
        for key in ("data", "classes"):
            np.testing.assert_array_equal(ours[key], ds.get_data(i, key))
    # lengths are each key's own, known without reading
    np.testing.assert_array_equal(
        zipped.lengths("classes"), [len(zipped.read(i)["classes"]) for i in range(24)]
    )
    # read_many asks each source once and gives the same as read
    many = zipped.read_many([3, 0, 3, 23])
    for got, i in zip(many, [3, 0, 3, 23]):
        np.testing.assert_array_equal(got["classes"], zipped.read(i)["classes"])


def test_zip_missing_tags_name_the_source_count_and_examples(feat_align, tmp_path):
    feat_path, _, tags, alignments = feat_align
    short = {t: a for t, a in alignments.items() if t not in tags[5:9]}
    path = str(tmp_path / "short.hdf")
    write_returnn_alignments(path, short, 9)
    sources = {"feat": sl.HDFSource(feat_path), "align": sl.HDFSource(path)}
    with pytest.raises(DataError) as e:
        ZipSource(sources, data_map=DATA_MAP)
    message = str(e.value)
    assert "source 'align' lacks 4 of the 24 tags of control source 'feat'" in message
    assert repr(tags[5]) in message and "missing='intersect'" in message
    with pytest.warns(DataWarning, match="left out 4 of 24 tags"):
        inter = ZipSource(sources, data_map=DATA_MAP, missing="intersect")
    assert len(inter) == 20 and inter.left_out == {"align": 4} and inter.num_left_out == 4
    assert list(inter.tags) == [t for t in tags if t not in tags[5:9]]
    for i, t in enumerate(inter.tags):
        np.testing.assert_array_equal(inter.read(i)["classes"], alignments[t])


def test_zip_bad_arguments(feat_align):
    feat_path, align_path, _, _ = feat_align
    sources = {"feat": sl.HDFSource(feat_path), "align": sl.HDFSource(align_path)}
    with pytest.raises(DataError, match=r"source 'align' has no key 'classes'"):
        ZipSource(sources, data_map={"data": ("feat", "data"), "y": ("align", "classes")})
    with pytest.raises(OptionError, match=r"source 'ali' is not one of \['feat', 'align'\]"):
        ZipSource(sources, data_map={"data": ("ali", "data")})
    with pytest.raises(OptionError, match="control: got 'x'"):
        ZipSource(sources, data_map=DATA_MAP, control="x")
    with pytest.raises(OptionError, match="missing: got 'drop'"):
        ZipSource(sources, data_map=DATA_MAP, missing="drop")


def test_zip_duplicate_tag_on_the_other_side_is_ambiguous():
    feat = sl.MemorySource({"data": feats([3, 4])}, ["a", "b"])
    align = sl.MemorySource({"data": labels([1, 2, 3], 4)}, ["b", "a", "b"])
    with pytest.raises(
        DataError, match=r"tag 'b' .* is in source 'align' 2 times \(sequences \[0, 2\]"
    ):
        ZipSource({"feat": feat, "align": align}, data_map=DATA_MAP)


tag_text = st.text(st.sampled_from("ab/é\0-_x12"), max_size=19)


@settings(max_examples=150, deadline=None)
@given(st.lists(tag_text, max_size=40, unique=True), st.lists(tag_text, max_size=40), st.data())
def test_tag_join_equals_a_dict(left: list[str], right: list[str], data: st.DataObject):
    """The vectorised join gives what a dict gives, for tags of every length around the 8-byte
    word size (NUL cuts a tag, as RETURNN reads them), and refuses ambiguous duplicates."""
    right = right + data.draw(st.lists(st.sampled_from(left), max_size=10)) if left else right
    lp, rp = PackedTags.from_strings(left), PackedTags.from_strings(right)
    left_t, right_t = list(lp), list(rp)  # as stored (cut at NUL)
    where: dict[str, list[int]] = {}
    for j, t in enumerate(right_t):
        where.setdefault(t, []).append(j)
    if any(len(where.get(t, [])) > 1 for t in left_t):
        with pytest.raises(DuplicateTagError):
            join(lp, rp)
        return
    want = [where.get(t, [-1])[0] for t in left_t]
    assert join(lp, rp).tolist() == want


def test_tag_join_scales_without_a_dict():
    """200k tags: the join is exact (a shuffled, partial copy), with hashes that can't help it."""
    n = 200_000
    tags = PackedTags.from_array(np.array([f"c/rec{i // 7}/s{i % 7}".encode() for i in range(n)]))
    perm = RNG.permutation(n)[: n - 100]
    other = PackedTags.from_array(np.array([tags.raw(int(i)) for i in perm]))
    got = join(tags, other)
    want = np.full(n, -1)
    want[perm] = np.arange(len(perm))
    np.testing.assert_array_equal(got, want)


# ---- ConcatSource ----


def corpus(n: int, dim: int = 5, vocab: int = 9, prefix: str = "c") -> sl.MemorySource:
    lens = RNG.integers(1, 20, n)
    return sl.MemorySource(
        {"data": feats(lens, dim), "classes": labels(lens // 2 + 1, vocab)},
        [f"{prefix}/{i}" for i in range(n)],
        {"classes": vocab},
    )


def test_concat_reads_each_corpus_in_order(tmp_path):
    a, b = corpus(5, prefix="a"), corpus(7, prefix="b")
    sl.write_hdf(str(tmp_path / "b.hdf"), b)
    concat = ConcatSource({"libri": a, "ted": sl.HDFSource(str(tmp_path / "b.hdf"))})
    assert len(concat) == 12 and concat.keys == ("data", "classes")
    names, bounds = concat.corpus_layout()
    assert names == ("libri", "ted") and bounds.tolist() == [0, 5, 12]
    assert list(concat.tags) == list(a.tags) + list(b.tags)
    for i in range(12):
        src, j = (a, i) if i < 5 else (b, i - 5)
        for key in ("data", "classes"):
            np.testing.assert_array_equal(concat.read(i)[key], src.read(j)[key])
            assert concat.lengths(key)[i] == len(src.read(j)[key])
    many = concat.read_many([11, 0, 5])
    np.testing.assert_array_equal(many[0]["data"], b.read(6)["data"])
    np.testing.assert_array_equal(many[1]["data"], a.read(0)["data"])
    assert "corpus 'ted' sequence 6" in concat.where(11)


@pytest.mark.parametrize(
    ("other", "what"),
    [
        (lambda: corpus(4, dim=7), "'data' is float32[T, 7] in corpus 'ted' but float32[T, 5]"),
        (
            lambda: corpus(4, vocab=11),
            "'classes' is int32[T] sparse(vocab=11) in corpus 'ted' but int32[T] sparse(vocab=9)",
        ),
        (
            lambda: sl.MemorySource({"data": [np.zeros((3, 5), np.float64)]}),
            "'data' is float64[T, 5] in corpus 'ted' but float32[T, 5] in corpus 'libri'",
        ),
    ],
)
def test_concat_key_mismatch_names_corpus_key_and_both_values(other, what):
    with pytest.raises(DataError) as e:
        ConcatSource({"libri": corpus(3), "ted": other()})
    assert f"key {what}" in str(e.value)


def test_concat_missing_key_and_empty_corpus():
    only_data = sl.MemorySource({"data": feats([3])})
    with pytest.raises(DataError, match=r"corpus 'ted' has no key 'classes'.*keys=\[\.\.\.\]"):
        ConcatSource({"libri": corpus(3), "ted": only_data})
    assert ConcatSource({"libri": corpus(3), "ted": only_data}, keys=["data"]).keys == ("data",)
    empty = sl.MemorySource({"data": [], "classes": []}, vocab_sizes={"classes": 9})
    with pytest.raises(DataError, match=r"corpus 'ted' .* has no sequences"):
        ConcatSource({"libri": corpus(3), "ted": empty})
    with pytest.raises(OptionError, match="non-empty mapping"):
        ConcatSource({})


def test_sources_open_no_file_until_read_and_pickle_without_handles(feat_align):
    """Opening reads metadata only and closes the files; each process opens its own lazily."""
    feat_path, align_path, _, _ = feat_align

    def open_files() -> int:
        return h5py.h5f.get_obj_count(h5py.h5f.OBJ_ALL, h5py.h5f.OBJ_FILE)

    before = open_files()
    zipped = ZipSource(
        {"feat": sl.HDFSource(feat_path), "align": sl.HDFSource(align_path)}, data_map=DATA_MAP
    )
    both = ConcatSource({"a": zipped, "b": zipped})
    assert open_files() == before
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = both.read(30)
    copy = pickle.loads(pickle.dumps(both))
    np.testing.assert_array_equal(copy.read(30)["classes"], first["classes"])
