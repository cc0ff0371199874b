"""The package version (pyproject.toml's [project] version must match: tests/test_api_cpu.py)."""

__version__ = "0.1.0"
