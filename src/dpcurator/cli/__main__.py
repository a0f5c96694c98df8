"""``python -m dpcurator.cli``: the ``dpcurator`` console script."""

import sys

from dpcurator.cli.main import main

sys.exit(main())
