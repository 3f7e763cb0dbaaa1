"""Live consumer lag: samples of committed/max offsets on a timer (``sampler``), a pure
Burrow-style evaluation of each queue's and group's window (``status``), settings (``config``)."""
