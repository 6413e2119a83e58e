"""`python -m cambrian.meta_agent.llm --model PATH --alias A --port P`: the llama.cpp server child of `LocalServer`."""

import sys

from cambrian.meta_agent.llm.serve import main

sys.exit(main())
