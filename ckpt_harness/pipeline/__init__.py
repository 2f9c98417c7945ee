"""The pipelines: a target and a plan become judged cases (verify, explore), through baselines and fault cases.

Everything here takes a `Target`; what differs between kinds it asks the
target's capabilities (`Target.caps`), which for now mirror the kind
(issue 47 makes them a typed set a check declares).
"""
