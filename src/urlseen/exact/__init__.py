"""The exact filter (IMP-CBFilter): a counting filter in front of a fingerprint library."""
