"""Packed tags: the vectorised hash screen finds exactly the duplicates a plain dict finds."""

from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.sources.hdf_layout import PackedTags
from seqloader.trainer.checks import duplicate_tags


def plain_duplicates(tags: list[str]) -> dict[str, list[int]]:
    first: dict[str, int] = {}
    dups: dict[str, list[int]] = {}
    for i, t in enumerate(tags):
        j = first.setdefault(t, i)
        if j != i:
            dups.setdefault(t, [j]).append(i)
    return dups


tag_lists = st.lists(
    st.text(alphabet=st.sampled_from("ab/é0\x01"), min_size=0, max_size=6), max_size=80
)


@settings(max_examples=60, deadline=None)
@given(tags=tag_lists, block=st.integers(1, 9))
def test_hash_screen_equals_plain_dict(tags, block):
    packed = PackedTags.from_strings(tags)
    assert list(packed) == tags
    h = packed.hashes(block=block)
    assert len(h) == len(tags)
    for i, t in enumerate(tags):  # equal tags, equal hashes (the screen's premise)
        assert h[i] == h[tags.index(t)]
    assert duplicate_tags(packed) == plain_duplicates(tags)
    assert duplicate_tags(tags) == plain_duplicates(tags)


def test_large_corpus_with_few_duplicates():
    tags = [f"corpus/rec{i // 7:06d}/{i % 7}" for i in range(50_000)]
    tags[40_000] = tags[3]
    tags[49_999] = tags[3]
    tags[123] = ""
    tags[124] = ""
    got = duplicate_tags(PackedTags.from_strings(tags))
    assert got == {tags[3]: [3, 40_000, 49_999], "": [123, 124]}
