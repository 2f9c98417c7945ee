"""Jobs with planted checkpoint bugs, and the correct reference they are variations of.

Every check the harness makes is proven both ways against these: the bug
must be flagged under its property, the reference must pass.

- `jobs`: resume bugs a fault-free verification catches (a key not restored,
  a wrong step) and jobs that break the contract or hang;
- `checkpointers`: checkpointers written from scratch, one correct
  (`ReferenceCheckpointer`) and one per classic crash-consistency bug;
- `scenario_jobs`: one bug per catalogue check (overwrite, reshard, stall,
  node-local rank 0).
"""
