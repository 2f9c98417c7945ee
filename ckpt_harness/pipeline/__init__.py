"""The pipelines: a target and a plan become judged cases (verify, explore), through baselines and fault cases.

Everything here takes a `Target`; what differs between kinds it asks the
target: its capabilities (`Target.caps`, each a `targets.Capability`), its
save steps, its repro arguments.
"""
