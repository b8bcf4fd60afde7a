"""The ``oversmooth`` command line (installed as ``oversmooth.cli``)."""
