"""Work in other processes: local worker pools and a Dask cluster."""
