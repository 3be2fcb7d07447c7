"""Home of libonnxopt_ops: its C sources, their generator (build.py) and, after
`pip install`, the compiled library.

A package rather than a plain folder so that setuptools installs the sources beside the built
library: onnxopt.runtime.library can then still compile it where the build was skipped.
"""
