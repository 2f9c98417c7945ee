"""Probes and the trace they record; later, fault kinds and the durability model."""
