"""Real services for the tests: the Temporal dev server, PostgreSQL, a worker thread."""
