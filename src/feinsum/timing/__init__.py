"""Timing on a device: build, validate and time one configuration (:mod:`.measurement`), in
warm worker processes (:mod:`.isolation`); the roofline microbenchmarks; the fingerprint of
the code a configuration generates."""
