import sys

from jaxrules.cli import main

sys.exit(main())
