"""The pipelines: a target and a plan become judged cases (verify, explore), through baselines and fault cases.

Everything here takes a `Target` and never asks which kind it is.
"""
