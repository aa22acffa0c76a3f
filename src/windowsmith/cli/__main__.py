"""``python -m windowsmith.cli``: the ``windowsmith`` command."""

from . import main

if __name__ == "__main__":  # pragma: no cover
    main()
