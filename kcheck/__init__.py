"""kcheck: is a Gaussian-kernel classifier clearly better than a linear one for this data set?"""

__version__ = "0.4.1"
