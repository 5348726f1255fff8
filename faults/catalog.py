"""Every scenario the harness can run, by name: each topic's module lists its own."""
from faults import scenarios

SCENARIOS = {}
for module in (scenarios,):
    for name, scenario in module.SCENARIOS.items():
        assert name not in SCENARIOS, name
        SCENARIOS[name] = scenario
