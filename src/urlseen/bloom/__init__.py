"""The Bloom filter family in one process: bloom, counting, multi-dimensional, rotating, sizing."""
