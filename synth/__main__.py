"""`python -m synth --out DIR ...`: write a synthetic hospital into a landing zone."""

import sys

from synth.hospital import main

sys.exit(main())
