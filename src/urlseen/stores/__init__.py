"""Where a filter's data lives: process memory, a memory-mapped state file (Redis later)."""
