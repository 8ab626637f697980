"""Where filters keep their data: process memory, memory-mapped state files, SQLite, Redis."""
