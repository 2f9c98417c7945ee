"""How each kind of catalogue scenario is run and judged.

One module per check (named by a scenario's `check` key). Each defines
`PARAMS`, the parameters a scenario may set with their defaults (a default of
None takes an integer), an optional `validate(params)` returning a problem to
report, and `run(bench, scenario, cases)` returning a `ScenarioResult`;
`cases` limits the run to named cases, as repro lines do.
"""
