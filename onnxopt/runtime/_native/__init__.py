"""Home of the C shim (shim.c) and, after `pip install`, its compiled library.

A package rather than a plain folder so that setuptools installs shim.c beside
the built library: the loader can then still compile it on machines where the
extension build was skipped.
"""
