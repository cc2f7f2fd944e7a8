"""The storage layer: on-disk schemas, pool readers and writers, consolidation of shards,
conversions from and to published formats, problem sets, atomic writes, user-editable files."""
