"""LIBSVM text read and written, kcheck's own formats read back, and outputs written atomically."""
