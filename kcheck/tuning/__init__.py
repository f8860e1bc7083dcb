"""Hyperparameter searches: C for LIBLINEAR, (C, gamma) for the RBF SVM on a grid or sample."""
