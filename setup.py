"""Build configuration for the optional compiled record decoder.

Everything else about the package is declared in pyproject.toml. The
extension is optional: without a C compiler the install still succeeds and
:mod:`gengroup.protocol.records` uses its pure-Python decoder.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gengroup.protocol._speedups",
            sources=["gengroup/protocol/_speedups.c"],
            optional=True,
        )
    ]
)
