"""The dynamic splittable Bloom filter: routing, splits, the leaf tree, its coding; no Redis."""
