"""Shared foundations: storage (atomic writes, table I/O, DataError), table schemas, config, CLI glue,
seeding and distributed helpers. Imports nothing else from the pipeline."""
