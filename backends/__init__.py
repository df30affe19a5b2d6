"""Runtimes, one module per device, imported only when that device is first used."""
