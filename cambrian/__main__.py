"""`python -m cambrian ...`: the `cambrian` command line."""

from cambrian.meta_agent.cli import main

main()
