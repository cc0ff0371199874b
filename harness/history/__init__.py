"""The run history: a SQLite store every gate run appends to (store.py) and the trend view over it (trends.py)."""
