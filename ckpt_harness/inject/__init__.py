"""Probes and the trace they record, the fault kinds they fire, and the durability model of what a power loss leaves."""
