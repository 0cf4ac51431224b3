"""``python -m memoryd.services.cli``: how ``memoryd up`` starts its children."""

import sys

from memoryd.services.cli.app import main

sys.exit(main())
