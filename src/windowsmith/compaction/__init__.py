"""History compaction in layers, cheapest first."""
