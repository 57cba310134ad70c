"""The optional compiled row kernel (``seqloader.sources._rowcopy``, our own C, no dependency):
one call per batch key copies the rows, zeroes the padding and tests NaN/Inf in one pass. It is
built by ``pip install`` wherever a C compiler and Python's headers exist; where the build fails
the install goes on without it and the numpy path runs (``sources/row_kernel.py``). Everything
else about the package is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "seqloader.sources._rowcopy",
            ["src/seqloader/sources/_rowcopy.c"],
            optional=True,
        )
    ]
)
