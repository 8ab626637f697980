"""Where a local filter keeps its data: the state format, memory maps, seals, SQLite rules."""
