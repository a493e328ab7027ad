"""``python3 -m sglang.launch_server ...`` in the fake engine image: the fake engine in SGLang's shape."""

import sys

from fake_engine import main

sys.exit(main("sglang", sys.argv[1:]))
