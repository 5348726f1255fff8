"""Every scenario the harness can run, by name: each topic's module lists its own."""
from faults import disks, scenarios

SCENARIOS = {}
for module in (scenarios, disks):
    for name, scenario in module.SCENARIOS.items():
        assert name not in SCENARIOS, name
        SCENARIOS[name] = scenario
