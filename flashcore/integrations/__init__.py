"""Adapters that plug FlashCore into other libraries (each imports its library lazily)."""
