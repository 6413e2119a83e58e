"""`python -m cambrian`: the `cambrian` command."""

from cambrian.meta_agent.cli import main

main()
