"""The search loop, mutation operators, FM access and the CLI."""

__version__ = "0.1.0"
