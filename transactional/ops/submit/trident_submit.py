"""The ``spark-submit`` entry point of spark-trident (docs/cluster.md)::

    trident package my_topology.py -o dist          # -> dist/trident-code-<hash>.zip
    spark-submit --master MASTER --py-files dist/trident-code-<hash>.zip --files my_topology.py \\
        "$(python -c 'import transactional.ops.ship as s; print(s.SUBMIT_SCRIPT)')" run my_topology.py [options]

The arguments after the script are ``trident``'s (``run FILE ...``). This file lives in a
directory of its own: the script's directory goes first on ``sys.path``, and nothing
there may shadow another module.
"""

import sys

from transactional.ops.cli import main

if __name__ == "__main__":
    sys.exit(main())
