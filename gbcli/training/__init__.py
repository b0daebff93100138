"""Gradient-descent training (protocol section 4): the plain loop (`loop.train`) and the losses."""
