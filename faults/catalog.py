"""Every scenario the harness can run, by name: each topic's module lists its own."""
from faults import clocks, membership, scenarios

SCENARIOS = {}
for module in (scenarios, clocks, membership):
    for name, scenario in module.SCENARIOS.items():
        assert name not in SCENARIOS, name
        SCENARIOS[name] = scenario
