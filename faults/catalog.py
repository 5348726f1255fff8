"""Every scenario the harness can run, by name: each topic's module lists its own."""
from faults import scenarios
from faults import clocks

SCENARIOS = {}
for module in (scenarios, clocks):
    for name, scenario in module.SCENARIOS.items():
        assert name not in SCENARIOS, name
        SCENARIOS[name] = scenario
