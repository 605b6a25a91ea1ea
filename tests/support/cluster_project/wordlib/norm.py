"""Word normalisation, imported by executors (never installed anywhere)."""

import os


def normalize(word: str) -> str:
    return word.strip().lower()


def where() -> str:
    """Where this module was imported from, and the process's working directory."""
    return f"{__file__}|{os.getcwd()}"
