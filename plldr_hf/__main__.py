import sys

from plldr_hf.cli import main


sys.exit(main())
