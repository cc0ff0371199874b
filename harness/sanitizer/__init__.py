"""sanitizer gate: see harness/sanitizer/*.py."""
