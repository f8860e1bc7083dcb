"""Feature-wise scaling as svm-scale does it: the arithmetic, fitting, range files, streaming."""
