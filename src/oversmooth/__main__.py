"""``python -m oversmooth``: the ``oversmooth`` command, for an environment whose scripts
folder is not on ``PATH``."""

from oversmooth.cli.main import main

if __name__ == "__main__":
    main()
