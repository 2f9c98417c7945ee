"""The scenario catalogue: scenarios as data, the checks that run them, benches, the matrix and its expectations."""
