"""The Flower glue: strategies, the round exchange, records, replies, checkpoints."""
