"""The LIBLINEAR and LIBSVM bindings behind one wrapper, the data they take, the C state."""
