"""Product terms: ``--explain``'s terms that carry the nonlinearity, and ``kcheck expand``."""
