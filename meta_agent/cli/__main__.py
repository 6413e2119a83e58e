"""`python -m meta_agent.cli`: the `cambrian` command."""

from meta_agent.cli import main

main()
