"""Examples that the docs refer to; importable as ``examples.<module>`` from the project root."""
