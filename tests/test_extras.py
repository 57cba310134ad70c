"""Optional dependencies are named when missing: the feature, the package and the extra."""

from __future__ import annotations

import sys

import pytest

from seqloader.errors import MissingDependencyError, OptionError
from seqloader.extras import EXTRAS, require
from test_cli import SPEC, corpus, hdf  # noqa: F401 (fixtures)
from test_cli_inprocess import one_line_error


def block(monkeypatch, *modules: str) -> None:
    """Make ``import MODULE`` fail as if it were not installed (None in sys.modules)."""
    for name in list(sys.modules):
        if name.partition(".")[0] in modules:
            monkeypatch.delitem(sys.modules, name)
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)


@pytest.mark.parametrize("module", sorted(EXTRAS))
def test_missing_package_names_the_extra(monkeypatch, module):
    block(monkeypatch, module)
    package, extra = EXTRAS[module]
    with pytest.raises(MissingDependencyError) as info:
        require(module, "doing X")
    msg = str(info.value)
    assert msg.startswith(f"doing X needs the {package} package")
    assert f"pip install 'seqloader[{extra}]'" in msg
    # caught by generic handlers of either kind
    assert isinstance(info.value, ImportError) and isinstance(info.value, OptionError)


def test_present_package_is_returned():
    assert require("pyarrow.compute", "x").__name__ == "pyarrow.compute"


def test_missing_dependency_of_a_package_is_named(monkeypatch):
    """The package imports, but one of its own dependencies is missing: say which."""
    block(monkeypatch, "pyarrow")
    for name in list(sys.modules):  # datasets is imported afresh, and fails importing pyarrow
        if name.partition(".")[0] == "datasets":
            monkeypatch.delitem(sys.modules, name)
    with pytest.raises(MissingDependencyError) as info:
        require("datasets", "HFSource")
    msg = str(info.value)
    assert "HFSource needs the datasets package (importing datasets failed:" in msg
    assert "pyarrow" in msg and "pip install 'seqloader[hf]'" in msg


def test_unknown_module_is_a_programming_error():
    with pytest.raises(KeyError, match="not an optional dependency"):
        require("numpy", "x")


def test_stats_plot_without_matplotlib_names_the_cli_extra(capsys, monkeypatch, hdf, tmp_path):  # noqa: F811
    block(monkeypatch, "matplotlib")
    png = tmp_path / "p.png"
    line = one_line_error(capsys, "stats", hdf, "--plot", png)
    assert "seqloader stats --plot needs the matplotlib package" in line
    assert "pip install 'seqloader[cli]'" in line
    assert not png.exists()


def test_adapters_name_their_extras(monkeypatch, tmp_path):
    import seqloader as sl

    block(monkeypatch, "lhotse", "datasets")
    with pytest.raises(MissingDependencyError, match=r"LhotseSource needs the lhotse .*\[lhotse\]"):
        sl.LhotseSource(tmp_path / "cuts.jsonl.gz")
    with pytest.raises(MissingDependencyError, match=r"HFSource needs the datasets .*\[hf\]"):
        sl.HFSource(object(), keys={"data": "x"})


def test_lightning_module_names_its_extra(monkeypatch):
    block(monkeypatch, "lightning")
    monkeypatch.delitem(sys.modules, "seqloader.lightning", raising=False)
    with pytest.raises(MissingDependencyError, match=r"pip install 'seqloader\[lightning\]'"):
        import seqloader.lightning  # noqa: F401
